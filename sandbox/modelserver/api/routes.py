"""The HTTP surface: OpenAI-compatible endpoints plus /health, /debug/probes and /v1/heads."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from sandbox.modelserver.api.errors import ApiError, error_body
from sandbox.modelserver.api.generate import GenerationRun, Runtime
from sandbox.modelserver.api.plans import Served, plan_chat, plan_completion
from sandbox.modelserver.api.requests import ChatRequest, CompletionRequest, PromptRequest, parse
from sandbox.modelserver.httpd.exchange import Exchange
from sandbox.modelserver.httpd.protocol import Handler
from sandbox.modelserver.lm.tokenizer import encode

Route = Callable[[Exchange], Awaitable[None]]


def build_handler(rt: Runtime, served: Served) -> Handler:
    created = int(time.time())

    async def models(ex: Exchange) -> None:
        rt.lifecycle.check_serving()
        card = {"id": served.model_id, "object": "model", "created": created}
        card |= {"owned_by": "handoff-sandbox", "root": served.model_id}
        card["max_model_len"] = served.max_model_len
        _respond_json(ex, {"object": "list", "data": [card]})

    async def health(ex: Exchange) -> None:
        status = rt.lifecycle.status
        _respond_json(ex, {"status": status}, 200 if status == "ready" else 503)

    async def completions(ex: Exchange) -> None:
        rt.lifecycle.check_serving()
        body = parse(CompletionRequest, _json_body(ex))
        GenerationRun(plan_completion(body, served, ex.received_ns), rt, ex, ex.received_ns)

    async def chat(ex: Exchange) -> None:
        rt.lifecycle.check_serving()
        body = parse(ChatRequest, _json_body(ex))
        GenerationRun(plan_chat(body, served, ex.received_ns), rt, ex, ex.received_ns)

    async def debug_probes(ex: Exchange) -> None:
        _respond_json(ex, {"model": served.model_id, "probes": await _readout("probes", ex)})

    async def classify(ex: Exchange) -> None:
        _respond_json(ex, {"model": served.model_id, "heads": await _readout("heads", ex)})

    async def _readout(kind: str, ex: Exchange) -> dict[str, Any]:
        rt.lifecycle.check_serving()
        tokens = encode(parse(PromptRequest, _json_body(ex)).prompt)
        with rt.lifecycle.tracked():
            return await asyncio.wrap_future(rt.engine.link.readout(kind, tokens))

    routes: dict[str, dict[str, Route]] = {
        "/v1/models": {"GET": models},
        "/health": {"GET": health},
        "/v1/completions": {"POST": completions},
        "/v1/chat/completions": {"POST": chat},
        "/debug/probes": {"POST": debug_probes},
        "/v1/heads": {"POST": classify},
    }

    async def handle(ex: Exchange) -> None:
        try:
            await _route(routes, ex)(ex)
        except ApiError as exc:
            if not ex.started:
                ex.respond(exc.status, error_body(exc))
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            if not ex.started:
                ex.respond(500, error_body(ApiError(500, f"internal error: {exc!r}")))

    return handle


def _route(routes: dict[str, dict[str, Route]], ex: Exchange) -> Route:
    methods = routes.get(ex.head.path)
    if methods is None:
        raise ApiError(404, f"no route {ex.head.path}: the server has {sorted(routes)}")
    if ex.head.method not in methods:
        raise ApiError(405, f"{ex.head.path} takes {sorted(methods)}, not {ex.head.method}")
    return methods[ex.head.method]


def _respond_json(ex: Exchange, obj: object, status: int = 200) -> None:
    ex.respond(status, json.dumps(obj, separators=(",", ":")).encode())


def _json_body(ex: Exchange) -> Any:
    try:
        return json.loads(ex.body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc
