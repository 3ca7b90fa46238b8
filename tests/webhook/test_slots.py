"""One handoff per Service in Prefect, against a real Prefect server: while a run holds
a Service's slot, another Service's slot is free, a run started by hand is refused
quickly, and a merge's run waits in line and gets the slot once it is released. Only a
taken slot makes a run wait or be refused: a Prefect server slow to answer does not."""

from __future__ import annotations

import threading
import time
import uuid
from urllib.parse import urlparse

import pytest
from prefect import get_client
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.lease import HandoffInProgress
from flows.slots import REFUSE_AFTER_S, limit_name, service_slot
from tests.webhook.servers import PrefectServer
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
