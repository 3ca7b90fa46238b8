"""The relay's ASGI app: POST /hooks/git takes a forge delivery into the relay's store,
GET /deliveries/<id> shows what became of it, GET /healthz answers ok.

Order of checks, each answering at once: body size, time and the bytes bodies being
received hold (413, 408, 503: intake.py), signature (401), JSON (400), event and
delivery headers (400), payload shape and field limits (400), not a merge into the
watched branch (200, ignored; recorded so). A merge is then written to the store (the
verified body and headers) and answered 202 accepted: nothing the relay does afterwards
(git, Prefect) happens while the forge waits. The worker (worker.py) gives it its
outcome. A delivery id seen before is answered from the store: 202 while it is queued,
200 replayed once final (a refused one is queued again); 503 when the store holds
`max_records` queued deliveries or cannot be written.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from flows.webhook.catchup import catch_up_in_background
from flows.webhook.deliveries import DeliveryStore
from flows.webhook.gitcmd import clip
from flows.webhook.intake import ByteBudget, Refused, body_of
from flows.webhook.mirror import Upstream
from flows.webhook.mirrors import MirrorPool
from flows.webhook.payload import HeaderError, NotAMerge, PayloadError, parse_merge, read_headers
from flows.webhook.settings import RelaySettings
from flows.webhook.signature import check_signature
from flows.webhook.worker import Worker

log = logging.getLogger("handoff.webhook")
MAX_HEADER_BYTES = 16 * 1024
LOG_CHARS = 300  # a logged detail is clipped: payload values in it may be long
STORE_FILE = "deliveries.sqlite"


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


def open_store(settings: RelaySettings) -> DeliveryStore:
    return DeliveryStore(
        settings.state_dir / STORE_FILE,
        keep_days=settings.keep_days,
        max_records=settings.max_records,
    )


def create_app(settings: RelaySettings) -> Starlette:
    store = open_store(settings)
    upstream = Upstream(
        pool=MirrorPool(
            settings.state_dir / "mirrors",
            max_count=settings.max_mirrors,
            max_bytes=settings.max_mirror_bytes,
        ),
        clone_url=settings.clone_url,
        clone_hosts=settings.clone_hosts,
    )
    worker = Worker(settings, store, upstream)
    budget = ByteBudget(settings.max_buffered_bytes, settings.max_peer_buffered_bytes)

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
        try:
            forge, event, delivery = read_headers(request.headers)
        except HeaderError as exc:
            return _reply(400, "malformed", str(exc))
        try:
            merge = parse_merge(forge, event, data, branch=settings.branch)
        except PayloadError as exc:
            return _reply(400, "malformed", str(exc), delivery=delivery)
        try:
            if isinstance(merge, NotAMerge):
                await run_in_threadpool(store.record_final, delivery, "-", "ignored", merge.reason)
                return _reply(200, "ignored", merge.reason, delivery=delivery)
            headers = {k: v for k, v in request.headers.items() if k.startswith("x-")}
            accepted, known = await run_in_threadpool(
                store.accept, delivery, merge.repository.lower(), headers, body
            )
        except sqlite3.Error as exc:
            log.error("store %s not written: %s", settings.state_dir / STORE_FILE, exc)
            return _reply(503, "busy", f"the relay cannot store deliveries now ({exc}); retry")
        if accepted == "full":
            return _reply(
                503,
                "busy",
                f"{settings.max_records} deliveries queued, the relay's cap; retry later",
                delivery=delivery,
            )
        if accepted == "final-before" and known is not None:
            return _reply(
                200,
                "replayed",
                f"delivery {delivery} was processed before: {known.outcome}",
                delivery=delivery,
                record=known.public(),
            )
        worker.wake()
        return _reply(
            202,
            "accepted",
            f"delivery {delivery} of merge {merge.merge_commit[:12]} stored; its outcome: "
            f"GET /deliveries/{delivery}",
            delivery=delivery,
        )

    async def delivery_of(request: Request) -> JSONResponse:
        known = await run_in_threadpool(store.get, request.path_params["delivery"])
        if known is None:
            return JSONResponse({"detail": "no such delivery in the relay's store"}, 404)
        return JSONResponse(known.public())

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        worker.start()  # queued deliveries of an earlier run are resumed
        if settings.reconcile_on_start:  # and merges sent while it was down are found
            catch_up_in_background(settings.prefect_api_url)
        try:
            yield
        finally:
            await run_in_threadpool(worker.stop)

    return Starlette(
        routes=[
            Route("/hooks/git", hook, methods=["POST"]),
            Route("/deliveries/{delivery:str}", delivery_of),
            Route("/healthz", healthz),
        ],
        lifespan=lifespan,
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
