"""One handoff per Service in Prefect, against a real Prefect server: while a run holds
a Service's slot, another Service's slot is free, a run started by hand is refused
quickly, and a merge's run waits in line and gets the slot once it is released."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.lease import HandoffInProgress
from flows.slots import service_slot
from tests.webhook.servers import PrefectServer


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
