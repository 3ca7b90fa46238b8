"""The relay's ASGI app: POST /hooks/git takes a forge delivery, GET /healthz answers ok.

Order of checks, each answering at once: body size, time and the bytes all bodies hold
(413, 408, 503: intake.py), signature (401), JSON (400), event and delivery headers
(400), payload shape and field limits (400), not a merge into the watched branch (200,
ignored), deliveries being processed at the cap (503), delivery relayed before (200,
replayed) or in flight (503), changed files → affected handoffs, each (spec, merge)
relayed once, then one Prefect event per handoff (200). A delivery counts as relayed
only once that is done: a failure (Prefect down or slow: 503; git past its deadline:
503; a merge that cannot be fetched: 502) releases it, so the forge's retry is
processed and not mistaken for a replay.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from pathlib import PurePosixPath
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from flows.webhook.deliveries import DeliveryLog, MergeInFlight
from flows.webhook.events import MergeEvent, PrefectApiError, build_event, emit_events
from flows.webhook.gitcmd import clip
from flows.webhook.intake import ByteBudget, Refused, body_of
from flows.webhook.mirror import MirrorError, MirrorTimeout, Upstream, fetch_merge
from flows.webhook.mirrors import MirrorPool
from flows.webhook.payload import (
    HeaderError,
    Merge,
    NotAMerge,
    PayloadError,
    parse_merge,
    read_headers,
)
from flows.webhook.settings import RelaySettings
from flows.webhook.signature import check_signature
from flows.webhook.specs import HandoffTarget, SpecIndex, index_specs

log = logging.getLogger("handoff.webhook")
MAX_HEADER_BYTES = 16 * 1024
LOG_CHARS = 300  # a logged detail is clipped: payload values in it may be long


def _reply(
    status: int, outcome: str, detail: str, *, close: bool = False, **extra: Any
) -> JSONResponse:
    """The answer, logged (clipped); close: end the connection (its body was not read)."""
    log.info("%s %s: %s", status, outcome, clip(detail, LOG_CHARS))
    headers = {"connection": "close"} if close else None
    if status == 503:
        headers = {**(headers or {}), "retry-after": "5"}
    body = {"outcome": outcome, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, headers=headers)


def create_app(settings: RelaySettings) -> Starlette:
    deliveries = DeliveryLog(
        settings.state_dir / "deliveries.sqlite",
        keep_days=settings.keep_days,
        max_records=settings.max_records,
        lease_s=settings.git_timeout_s + 3 * settings.prefect_timeout_s + 300,
    )
    upstream = Upstream(
        pool=MirrorPool(
            settings.state_dir / "mirrors",
            max_count=settings.max_mirrors,
            max_bytes=settings.max_mirror_bytes,
        ),
        clone_url=settings.clone_url,
        clone_hosts=settings.clone_hosts,
    )
    budget = ByteBudget(settings.max_buffered_bytes)
    in_flight = [0]  # deliveries being processed (the event loop alone counts them)

    async def hook(request: Request) -> JSONResponse:
        header_bytes = sum(len(k) + len(v) + 4 for k, v in request.scope["headers"])
        if header_bytes > MAX_HEADER_BYTES:  # h11 caps headers only while they arrive
            return _reply(400, "malformed", f"headers over {MAX_HEADER_BYTES} bytes", close=True)
        try:
            async with body_of(
                request,
                max_bytes=settings.max_body_bytes,
                timeout_s=settings.body_timeout_s,
                budget=budget,
            ) as body:
                return await _checked(body, request)
        except Refused as exc:
            return _reply(exc.status, exc.outcome, exc.detail, close=True)

    async def _checked(body: bytes, request: Request) -> JSONResponse:
        refused = check_signature(settings.secret, body, request.headers)
        if refused:
            return _reply(401, "bad-signature", refused)
        data = _json_of(body)
        if isinstance(data, JSONResponse):
            return data
        read = _merge_of(settings, request, data)
        if isinstance(read, JSONResponse):
            return read
        if in_flight[0] >= settings.max_deliveries:
            return _reply(
                503,
                "busy",
                f"{in_flight[0]} deliveries being processed, the relay's cap; retry later",
                delivery=read[1],
            )
        in_flight[0] += 1
        try:
            return await run_in_threadpool(_process, settings, upstream, deliveries, *read)
        finally:
            in_flight[0] -= 1

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[Route("/hooks/git", hook, methods=["POST"]), Route("/healthz", healthz)]
    )


def _process(
    settings: RelaySettings,
    upstream: Upstream,
    deliveries: DeliveryLog,
    merge: Merge,
    delivery: str,
) -> JSONResponse:
    """Claim the delivery, emit its events, and count it as seen only when that is done:
    on any failure the claim is released, so the forge's retry is processed."""
    claim = deliveries.begin(delivery)
    if claim == "done":
        return _reply(200, "replayed", f"delivery {delivery} was relayed before", delivery=delivery)
    if claim == "busy":
        return _reply(
            503,
            "retry",
            f"delivery {delivery} is being processed now; retry later",
            delivery=delivery,
        )
    final = False
    try:
        events = _events_for(settings, upstream, deliveries, merge, delivery)
        if events:
            emit_events(settings.prefect_api_url, events, timeout_s=settings.prefect_timeout_s)
        deliveries.finish(delivery)
        final = True
    except MergeInFlight as exc:
        return _reply(503, "retry", f"{exc}; retry later", delivery=delivery)
    except (MirrorError, PrefectApiError) as exc:
        retry_soon = isinstance(exc, PrefectApiError | MirrorTimeout)
        return _reply(503 if retry_soon else 502, "retry", str(exc), delivery=delivery)
    finally:
        if not final:
            deliveries.release(delivery)
    return _reply(
        200,
        "emitted" if events else "no-handoff",
        f"merge {merge.merge_commit[:12]}: "
        + (f"{len(events)} handoff(s) triggered" if events else "no handoff affected"),
        delivery=delivery,
        handoffs=[e["payload"]["spec"] for e in events],
        events=[e["id"] for e in events],
    )


def _json_of(body: bytes) -> Any:
    """The parsed body, or the 400 answer: not JSON, nested too deep to parse, or holding a
    lone surrogate (no UTF-8 form: it could be neither logged, stored nor sent on)."""
    try:
        data = json.loads(body)
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        return _reply(400, "malformed", "body is JSON nested too deeply to read")
    except UnicodeEncodeError:
        return _reply(400, "malformed", "body holds a lone surrogate (\\ud800-\\udfff)")
    except ValueError as exc:
        return _reply(400, "malformed", f"body is not JSON: {clip(str(exc))}")
    return data


def _merge_of(
    settings: RelaySettings, request: Request, data: Any
) -> tuple[Merge, str] | JSONResponse:
    """The merge and its delivery id, or the answer when the delivery is not one."""
    try:
        forge, event, delivery = read_headers(request.headers)
    except HeaderError as exc:
        return _reply(400, "malformed", str(exc))
    try:
        merge = parse_merge(forge, event, data, branch=settings.branch)
    except PayloadError as exc:
        return _reply(400, "malformed", str(exc), delivery=delivery)
    if isinstance(merge, NotAMerge):
        return _reply(200, "ignored", merge.reason, delivery=delivery)
    return merge, delivery


def _events_for(
    settings: RelaySettings,
    upstream: Upstream,
    deliveries: DeliveryLog,
    merge: Merge,
    delivery: str,
) -> list[dict[str, Any]]:
    """One event per affected handoff this merge has not triggered before."""
    changed, index = _read_merge(settings, upstream, merge)
    for error in index.errors:
        log.warning("spec skipped: %s", error)
    now = dt.datetime.now(dt.UTC)
    return [
        build_event(_merge_event(target, merge, delivery, changed), occurred=now)
        for target in index.affected(changed)
        if _first_time(deliveries, target, merge, delivery)
    ]


def _read_merge(
    settings: RelaySettings, upstream: Upstream, merge: Merge
) -> tuple[frozenset[str], SpecIndex]:
    """The merge's changed files and the specs at the merge commit (so a spec that the merge
    itself adds or edits counts), from one fetch into the mirror. A push lists its files,
    so when it cannot be fetched the relay's own checkout gives the specs; a pull request
    names no files and needs the mirror."""
    specs_in_repo = settings.specs_dir.resolve().relative_to(settings.repo_root.resolve())
    deadline = time.monotonic() + settings.git_timeout_s
    try:
        with fetch_merge(
            upstream, merge, PurePosixPath(specs_in_repo.as_posix()), deadline=deadline
        ) as merged:
            changed = merge.changed if merge.changed is not None else merged.changed_files()
            return changed, index_specs(merged.tree / specs_in_repo, merged.tree)
    except MirrorError as exc:
        if merge.changed is None:
            raise
        log.warning("%s; reading the specs from the relay's checkout instead", exc)
    return merge.changed, index_specs(settings.specs_dir, settings.repo_root)


def _first_time(
    deliveries: DeliveryLog, target: HandoffTarget, merge: Merge, delivery: str
) -> bool:
    earlier = deliveries.claim_merge(f"{target.name}@{merge.merge_commit}", delivery)
    if earlier is not None:
        log.info("%s: merge %s already relayed by %s", target.name, merge.merge_commit, earlier)
    return earlier is None


def _merge_event(
    target: HandoffTarget, merge: Merge, delivery: str, changed: frozenset[str]
) -> MergeEvent:
    return MergeEvent(
        spec=target.name,
        spec_file=target.spec_file,
        namespace=target.namespace,
        service=target.service,
        delivery_id=delivery,
        merge_commit=merge.merge_commit,
        merged_at=merge.merged_at,
        repository=merge.repository,
        branch=merge.branch,
        source=merge.forge,
        kind=merge.kind,
        changed=sorted(target.paths & changed),
    )
