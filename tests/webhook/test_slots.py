"""One handoff per Service in Prefect, against a real Prefect server: while a run holds
a Service's slot, another Service's slot is free, a run started by hand is refused
quickly, and a merge's run waits in line and gets the slot once it is released. Only a
taken slot makes a run wait or be refused: a Prefect server slow to answer does not. A
restart of the Prefect server does not keep the slot of a run that held it, and a slot
that no run holds is refused with the command that frees it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
from prefect import get_client
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.lease import HandoffInProgress
from flows.slots import REFUSE_AFTER_S, limit_name, service_slot
from sandbox import prefect_server, procs
from tests.webhook.servers import PrefectServer, start_prefect
from tests.webhook.slowproxy import slow_relay


def test_runs_of_one_service_wait_in_line_while_other_services_go_on(
    prefect: PrefectServer,
) -> None:
    namespace = f"slots-{uuid.uuid4().hex[:6]}"
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with (
            temporary_settings({PREFECT_API_URL: prefect.api_url}),
            service_slot(namespace, "busy", resuming=False),
        ):
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(60), "the first run did not get the Service's slot"
        with temporary_settings({PREFECT_API_URL: prefect.api_url}):
            with service_slot(namespace, "other", resuming=False):
                pass  # another Service: at once
            with pytest.raises(HandoffInProgress), service_slot(namespace, "busy", resuming=False):
                pass  # by hand: refused
            threading.Timer(3.0, release.set).start()
            asked = time.monotonic()
            with service_slot(namespace, "busy", resuming=False, queue_s=60):
                waited = time.monotonic() - asked
    finally:
        release.set()
        holder.join(timeout=30)
    assert waited >= 2.0, "the merge's run got the slot while another run held it"


def test_a_slow_answer_from_prefect_is_not_a_busy_service(prefect: PrefectServer) -> None:
    """Prefect grants a free slot later than a run by hand would wait for a taken one
    (a busy server): the run waits for the answer and holds the slot, and meanwhile
    another run is refused; afterwards the slot is free."""
    namespace = f"slots-{uuid.uuid4().hex[:6]}"
    port = urlparse(prefect.api_url).port
    assert port is not None
    relayed = slow_relay(port, marker="increment-with-lease", delay_s=REFUSE_AFTER_S + 3.0)
    with (
        relayed as relay,
        temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{relay}/api"}),
        service_slot(namespace, "free", resuming=False),  # the slow run
        temporary_settings({PREFECT_API_URL: prefect.api_url}),
        pytest.raises(HandoffInProgress),
        service_slot(namespace, "free", resuming=False),  # another: refused
    ):
        pass
    with (
        temporary_settings({PREFECT_API_URL: prefect.api_url}),
        get_client(sync_client=True) as client,
    ):
        limit = client.read_global_concurrency_limit_by_name(limit_name(namespace, "free"))
    assert limit.active_slots == 0, "the slow run's slot was not released"


@pytest.mark.slow
@pytest.mark.parametrize(
    "lease_storage",
    [
        prefect_server.LEASE_STORAGE,  # the sandbox's: on disk, kept across the restart
        "prefect.server.concurrency.lease_storage.memory",  # Prefect's default: forgotten
    ],
)
def test_a_prefect_restart_does_not_keep_the_slot_of_the_run_that_held_it(
    tmp_path: Path, lease_storage: str
) -> None:
    """The Prefect server restarted as the sandbox restarts it (its port, its database)
    while a run holds its Service's slot: the run goes on, and once it leaves the next run
    of the Service takes the slot at once."""
    namespace = f"slots-{uuid.uuid4().hex[:6]}"
    pair = os.environ["PREFECT_API_AUTH_STRING"]
    server = start_prefect(tmp_path, protected=True, pair=pair, lease_storage=lease_storage)
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            with service_slot(namespace, "svc", resuming=False):
                procs.stop(server.process)
                port = urlparse(server.api_url).port
                server.process, _ = prefect_server.spawn(
                    tmp_path, port, lease_storage=lease_storage
                )
                prefect_server.wait_healthy(server.process, server.api_url)
            with service_slot(namespace, "svc", resuming=False):
                pass
    finally:
        procs.stop(server.process)


def test_a_slot_no_run_holds_is_refused_with_the_command_that_frees_it(
    prefect: PrefectServer,
) -> None:
    """A slot counted with no lease behind it (as a Prefect server that forgot its leases
    leaves one): a run is refused, told the command that frees it, which does."""
    namespace = f"slots-{uuid.uuid4().hex[:6]}"
    name = limit_name(namespace, "leaked")
    with temporary_settings({PREFECT_API_URL: prefect.api_url}):
        with service_slot(namespace, "leaked", resuming=False):
            pass  # the limit exists
        with get_client(sync_client=True) as client:
            client.increment_concurrency_slots([name], 1, "concurrency")  # no lease
        with (
            pytest.raises(HandoffInProgress) as refused,
            service_slot(namespace, "leaked", resuming=False),
        ):
            pass
        command = str(refused.value).split("`")[1]
        assert command.startswith("prefect ") and name in command, refused.value
        env = {**os.environ, "PREFECT_API_URL": prefect.api_url}
        argv = [sys.executable, "-m", *shlex.split(command)]
        freed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert freed.returncode == 0, freed.stdout + freed.stderr
        with service_slot(namespace, "leaked", resuming=False):
            pass
