"""Tell people what needs them: a handoff waits for an approver, or it rolled back.

Sent through a Prefect notification block the user already configures (a Custom
Webhook block posts to Slack, Mattermost or Teams), named in the spec's
`notify.block` as `type-slug/name`. The block is loaded before the run writes
anything, so a wrong name fails at once and changes nothing; a notification that
cannot be delivered later is logged and never fails or stalls the handoff.
"""

from __future__ import annotations

from typing import Literal, Protocol

from prefect import get_run_logger
from prefect.blocks.abstract import NotificationBlock
from prefect.blocks.core import Block
from prefect.settings import PREFECT_API_URL

from flows.errors import PermanentError
from flows.spec import HandoffSpec

Event = Literal["approval", "rollback", "bake"]


class NotifyBlockError(PermanentError):
    """The spec's notify.block names no usable notification block."""


class _Sends(Protocol):
    """A notification block as called here, outside an event loop: its notify runs at
    once (Prefect dispatches it), though NotificationBlock declares it a coroutine."""

    def notify(self, body: str, subject: str | None = None) -> object: ...


class Notifier:
    """The spec's notification block and the events it is for."""

    def __init__(self, block: NotificationBlock, name: str, on: list[Event]) -> None:
        self.block: _Sends = block
        self.name, self.on = name, on

    def send(self, event: Event, subject: str, body: str) -> None:
        if event not in self.on:
            return
        log = get_run_logger()
        try:
            self.block.notify(body, subject=subject)
        except Exception as exc:  # the handoff goes on; the log says what to fix
            log.warning(
                "notification %r through block %s not delivered: %s; check the block's URL "
                "in the Prefect UI (Blocks)",
                subject,
                self.name,
                exc,
            )
        else:
            log.info("notified through block %s: %s", self.name, subject)


def load_notifier(spec: HandoffSpec) -> Notifier | None:
    """The block the spec names, loaded from the Prefect server; None without notify."""
    if spec.notify is None:
        return None
    name = spec.notify.block
    try:
        block = Block.load(name)
    except (ValueError, KeyError) as exc:
        raise NotifyBlockError(
            f"notify.block {name!r} of spec {spec.name}: no such block on the Prefect server "
            f"at {PREFECT_API_URL.value()} ({exc}); create it (UI: Blocks, e.g. a Custom "
            "Webhook) or fix notify.block"
        ) from exc
    if not isinstance(block, NotificationBlock):
        raise NotifyBlockError(
            f"notify.block {name!r} of spec {spec.name} is a {type(block).__name__}, not a "
            "notification block; name a Custom Webhook, Slack, Teams or Mattermost block"
        )
    return Notifier(block, name, list(spec.notify.on))
