"""Notifications through a Prefect block the user configures: a Custom Webhook block on
the real Prefect server posts to a real HTTP receiver; a wrong block name is a clear
error; an undeliverable notification is logged and does not fail the run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prefect import flow
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.report.notify import NotifyBlockError, load_notifier
from flows.spec import HandoffSpec, NotifySpec, load_spec
from tests.receiver import receiving, webhook_block
from tests.webhook.servers import PrefectServer
from tests.world import ROOT


@pytest.fixture(autouse=True)
def api(prefect: PrefectServer) -> Iterator[str]:
    """Flows and blocks in this module talk to the test's Prefect server."""
    with temporary_settings({PREFECT_API_URL: prefect.api_url}):
        yield prefect.api_url


def _spec(block: str) -> HandoffSpec:
    spec = load_spec(ROOT / "manifests/handoffs/clef-candle.yaml")
    return spec.model_copy(update={"notify": NotifySpec(block=block, on=["approval"])})


@flow(name="notify-probe")
def send_from_a_flow(block: str, event: str) -> None:
    notifier = load_notifier(_spec(block))
    assert notifier is not None
    notifier.send(event, "handoff x waits", "the evidence\nand a link")  # type: ignore[arg-type]


def test_a_notification_reaches_the_webhook(prefect: PrefectServer) -> None:
    with receiving() as receiver:
        block = webhook_block(receiver.url, prefect.api_url)
        send_from_a_flow(block, "approval")
        send_from_a_flow(block, "rollback")  # not asked for in notify.on
    assert receiver.texts() == ["handoff x waits\n\nthe evidence\nand a link"]


def test_a_wrong_block_name_is_a_clear_error(prefect: PrefectServer) -> None:
    with pytest.raises(NotifyBlockError, match=r"custom-webhook/nobody.*create it"):
        load_notifier(_spec("custom-webhook/nobody"))


def test_an_undeliverable_notification_does_not_fail_the_run(
    prefect: PrefectServer, caplog: pytest.LogCaptureFixture
) -> None:
    with receiving() as gone:
        url = gone.url  # nothing listens there any more
    send_from_a_flow(webhook_block(url, prefect.api_url), "approval")  # returns: only logged
    assert "not delivered" in caplog.text and "check the block's URL" in caplog.text


def test_a_block_address_without_its_type_is_refused() -> None:
    with pytest.raises(ValueError, match="block"):
        NotifySpec(block="approvers")
