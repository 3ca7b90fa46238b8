"""The `handoff.merge` Prefect events: build, emit, read back.

One event per (delivery, handoff). Its id is derived from the forge's delivery id
and the spec name (uuid5), so a redelivery that slips past the relay's own replay
guard still lands on the same id, and Prefect stores an event id once and starts
one run for it. The payload carries what the flow run needs (spec path, merge
commit, delivery id) and what orders merges (the merge time, then the receipt).
Written with the Prefect REST API (`POST /api/events`), which OSS servers accept
without a websocket; read back with `POST /api/events/filter` (pages of 50).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

import httpx

# Imported with this module (it imports Prefect), not on the first emit: importing Prefect
# takes seconds and holds the import lock, which would stall a relay's every thread in
# mid-delivery.
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel

from flows.prefect_access import auth_headers
from flows.webhook.event_signature import sign_event

MERGE_EVENT = "handoff.merge"
PROBE_EVENT = "handoff.probe"
RESOURCE_PREFIX = "handoff.spec."
SERVICE_LABEL = "handoff.service"
# Namespace of the uuid5 event ids; fixed so every relay derives the same id.
_EVENT_NS = uuid.UUID("8f6f3d3e-3b1c-4d55-9a57-5f0c9a0e6c21")
_TIMEOUT_S = 10.0
EVENTS_KEPT_DAYS = 7  # Prefect OSS default event retention


class PrefectApiError(RuntimeError):
    """The Prefect API was unreachable or refused a request."""


class MergeEvent(BaseModel):
    """The payload of a `handoff.merge` event."""

    spec: str
    spec_file: str
    namespace: str
    service: str
    delivery_id: str
    merge_commit: str
    merged_at: dt.datetime | None
    repository: str
    branch: str
    source: str  # the forge: forgejo, gitea, github
    kind: str  # push or pull_request
    changed: list[str]
    signature: str = ""  # the relay's, over what a run takes from it (event_signature.py)


class ReceivedMerge(BaseModel):
    """A merge event as the Prefect API returns it."""

    id: uuid.UUID
    occurred: dt.datetime
    merge: MergeEvent

    def order(self) -> tuple[dt.datetime, dt.datetime]:
        """Merges are ordered by merge time (the forge's), then by when the relay got them."""
        return (self.merge.merged_at or self.occurred, self.occurred)


def merge_event_id(delivery_id: str, spec: str) -> uuid.UUID:
    return uuid.uuid5(_EVENT_NS, f"{delivery_id}\n{spec}")


def service_key(namespace: str, service: str) -> str:
    return f"{namespace}/{service}"


def build_event(
    merge: MergeEvent, *, occurred: dt.datetime, key: Ed25519PrivateKey | None = None
) -> dict[str, Any]:
    """The event as the Prefect API takes it (JSON-ready); signed with `key` if given."""
    payload = merge.model_dump(mode="json")
    if key is not None:
        payload["signature"] = sign_event(payload, key)
    return {
        "id": str(merge_event_id(merge.delivery_id, merge.spec)),
        "occurred": occurred.isoformat(),
        "event": MERGE_EVENT,
        "resource": {
            "prefect.resource.id": RESOURCE_PREFIX + merge.spec,
            "prefect.resource.name": merge.spec,
            SERVICE_LABEL: service_key(merge.namespace, merge.service),
            "handoff.delivery": merge.delivery_id,
        },
        "related": [
            {
                "prefect.resource.id": f"git.commit.{merge.merge_commit}",
                "prefect.resource.role": "commit",
                "prefect.resource.name": f"{merge.repository}@{merge.merge_commit[:12]}",
            }
        ],
        "payload": payload,
    }


def emit_events(
    api_url: str, events: list[dict[str, Any]], *, timeout_s: float = _TIMEOUT_S
) -> None:
    """POST the events in one batch; PrefectApiError when Prefect did not take them (or did
    not answer within timeout_s, for each of connect, send and read)."""
    try:
        response = httpx.post(
            f"{api_url}/events", json=events, headers=auth_headers(), timeout=timeout_s
        )
    except httpx.HTTPError as exc:
        raise PrefectApiError(f"Prefect API {api_url} unreachable: {exc}") from exc
    if response.status_code >= 300:
        raise PrefectApiError(
            f"Prefect API {api_url}/events answered {response.status_code}: {response.text[:300]}"
        )


def read_merge_events(api_url: str, *, namespace: str, service: str) -> list[ReceivedMerge]:
    """Every merge event for the Service Prefect still keeps, oldest merge first."""
    since = dt.datetime.now(dt.UTC) - dt.timedelta(days=EVENTS_KEPT_DAYS)
    query = {
        "filter": {
            "event": {"name": [MERGE_EVENT]},
            "resource": {"labels": {SERVICE_LABEL: [service_key(namespace, service)]}},
            "occurred": {"since": since.isoformat()},
        },
        "limit": 50,
    }
    found: list[ReceivedMerge] = []
    try:
        with httpx.Client(headers=auth_headers(), timeout=_TIMEOUT_S) as http:
            page = _checked(http.post(f"{api_url}/events/filter", json=query))
            while True:
                found += [_received(e) for e in page["events"] if e.get("event") == MERGE_EVENT]
                if not page.get("next_page"):
                    break
                page = _checked(http.get(page["next_page"]))
    except httpx.HTTPError as exc:
        raise PrefectApiError(f"Prefect API {api_url} unreachable: {exc}") from exc
    return sorted(found, key=ReceivedMerge.order)


def wait_persisted(api_url: str, *, about: dict[str, str] | None = None) -> float:
    """Emit a probe event and wait until it is readable; return the seconds that took.

    Prefect persists events in batches (every few seconds), in the order it got them:
    once the probe is readable, every event received before it is readable too.
    """
    probe = uuid.uuid4()
    event = {
        "id": str(probe),
        "occurred": dt.datetime.now(dt.UTC).isoformat(),
        "event": PROBE_EVENT,
        "resource": {"prefect.resource.id": f"handoff.probe.{probe}", **(about or {})},
    }
    emit_events(api_url, [event])
    return wait_visible(api_url, probe)


def wait_visible(api_url: str, event_id: uuid.UUID, *, deadline_s: float = 60.0) -> float:
    """Poll until the event can be read back; return the seconds it took."""
    started = time.monotonic()
    since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    query = {"filter": {"id": {"id": [str(event_id)]}, "occurred": {"since": since.isoformat()}}}
    with httpx.Client(headers=auth_headers(), timeout=_TIMEOUT_S) as http:
        while time.monotonic() - started < deadline_s:
            try:
                if _checked(http.post(f"{api_url}/events/filter", json=query))["events"]:
                    return time.monotonic() - started
            except httpx.HTTPError as exc:
                raise PrefectApiError(f"Prefect API {api_url} unreachable: {exc}") from exc
            time.sleep(0.5)
    raise PrefectApiError(
        f"event {event_id} not readable from {api_url} after {deadline_s:.0f} s: "
        "is the server's event persister running?"
    )


def _checked(response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 300:
        raise PrefectApiError(
            f"Prefect API {response.request.url} answered {response.status_code}: "
            f"{response.text[:300]}"
        )
    body: dict[str, Any] = response.json()
    return body


def _received(raw: dict[str, Any]) -> ReceivedMerge:
    return ReceivedMerge(
        id=raw["id"], occurred=raw["occurred"], merge=MergeEvent.model_validate(raw["payload"])
    )
