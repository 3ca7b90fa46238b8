"""Is this still the newest merge for the Service? Asked before a handoff writes anything.

Merges can start runs out of order: runs waiting for their Service's turn take it in
no particular order, a forge redelivers late, two merges land a second apart. Only the
newest merge for a Service should be handed off; an older one stops before its first
write and says which merge supersedes it (checked when the run starts, and again when
its Service's turn comes).

Where the ordering truth lives: the relay's `handoff.merge` events in Prefect, one
per (merge, handoff), carrying the merge time from the forge. Merges are ordered by
merge time, then by when the relay received them (flows/webhook/events.py). Events
are written to Prefect's database in batches, so the check first emits a probe event
and waits until it is readable: every merge event received before it is then
readable too. A run started by hand (no delivery id) is not a merge and always
proceeds. This writes nothing to the cluster; in Prefect it tags the run
`service:<name>` / `handoff:<spec>` (how `handoff history` finds it) and leaves the
probe event.
"""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import TypeGuard

from pydantic import BaseModel

from flows.errors import TransientError
from flows.report.attest import load_public_key
from flows.report.record import Trigger
from flows.spec import HandoffSpec, load_spec
from flows.webhook.event_signature import public_key_file, verifies
from flows.webhook.events import (
    SERVICE_LABEL,
    PrefectApiError,
    ReceivedMerge,
    merge_event_id,
    read_merge_events,
    service_key,
    wait_persisted,
)


class NewestUnknown(TransientError):
    """The Prefect API could not be asked; the run must not guess."""


class Superseded(Exception):
    """A newer merge for the Service arrived while this run waited for its turn."""


class NewestCheck(BaseModel):
    newest: bool
    reason: str
    newer: list[str] = []  # the merges that supersede this one, newest last


def is_merge(trigger: Trigger | None) -> TypeGuard[Trigger]:
    """Started by a merge (through the relay), not by hand."""
    return trigger is not None and bool(trigger.delivery_id)


def ensure_newest(
    spec: HandoffSpec | str, trigger: Trigger | None, *, or_raise: bool = False
) -> NewestCheck:
    """Decide whether this run's merge is the newest for its Service (call it first, and
    again when the Service's turn comes); or_raise: raise Superseded when it is not.
    `spec` is the run's loaded spec, or a spec file, read only for a merge."""
    if not is_merge(trigger) or not trigger.delivery_id:  # is_merge's test, for mypy
        return NewestCheck(newest=True, reason="started by hand, not by a merge")
    if not isinstance(spec, HandoffSpec):
        spec = load_spec(Path(spec))
    api = _api_url()
    _tag_run(spec)
    try:
        wait_persisted(api, about={SERVICE_LABEL: service_key(spec.namespace, spec.service)})
        merges = read_merge_events(api, namespace=spec.namespace, service=spec.service)
    except PrefectApiError as exc:
        raise NewestUnknown(
            f"cannot tell whether merge {trigger.merge_commit} is the newest for Service "
            f"{service_key(spec.namespace, spec.service)}: {exc}; rerun when Prefect answers"
        ) from exc
    ours = merge_event_id(trigger.delivery_id, spec.name)
    check = compute_newest(ours, merges, public=public_key_file())
    if or_raise and not check.newest:
        raise Superseded(check.reason)
    return check


def compute_newest(
    ours_id: uuid.UUID, merges: list[ReceivedMerge], *, public: Path | None = None
) -> NewestCheck:
    """Is the merge event ours_id the newest merge among merges (one Service)? With the
    relay's public key, only the merges it signed count."""
    ignored = ""
    if public is not None:
        key = load_public_key(public)  # once, not per event
        signed = [m for m in merges if verifies(m.merge.model_dump(), m.merge.signature, key)]
        if len(signed) < len(merges):
            ignored = f" ({len(merges) - len(signed)} merge events not signed by the relay ignored)"
        merges = signed
    check = _newest(ours_id, merges)
    return check.model_copy(update={"reason": check.reason + ignored})


def _newest(ours_id: uuid.UUID, merges: list[ReceivedMerge]) -> NewestCheck:
    ours = next((m for m in merges if m.id == ours_id), None)
    if ours is None:
        return NewestCheck(
            newest=False,
            reason=f"merge event {ours_id} is not among the Service's merge events (older "
            "than their retention?): cannot prove it is the newest; run `handoff run` by hand",
        )
    newer = [
        m
        for m in merges
        if m.merge.merge_commit != ours.merge.merge_commit and m.order() > ours.order()
    ]
    if not newer:
        return NewestCheck(newest=True, reason=f"merge {_describe(ours)} is the newest")
    return NewestCheck(
        newest=False,
        reason=f"superseded: merge {_describe(newer[-1])} is newer than {_describe(ours)}; "
        f"only the newest merge for Service {ours.merge.namespace}/{ours.merge.service} "
        "is handed off, by its own run",
        newer=[_describe(m) for m in newer],
    )


def _describe(m: ReceivedMerge) -> str:
    at = (m.merge.merged_at or m.occurred).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{m.merge.merge_commit[:12]} of {m.merge.spec} (delivery {m.merge.delivery_id}, {at})"


def _api_url() -> str:
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    if not url:
        raise NewestUnknown(
            "a merge-triggered handoff needs the Prefect API to check that its merge is the "
            "newest: set PREFECT_API_URL"
        )
    return url.rstrip("/")


def _tag_run(spec: HandoffSpec) -> None:
    from prefect import get_client
    from prefect.runtime import flow_run

    if not flow_run.id:
        return
    tags = {*(flow_run.tags or []), f"service:{spec.service}", f"handoff:{spec.name}"}
    with get_client(sync_client=True) as client:
        client.update_flow_run(uuid.UUID(flow_run.id), tags=sorted(tags))
