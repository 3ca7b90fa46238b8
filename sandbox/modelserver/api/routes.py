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


class Api:
    """One handler per route; `handle` dispatches and turns errors into OpenAI-style bodies."""

    def __init__(self, rt: Runtime, served: Served) -> None:
        self.rt = rt
        self.served = served
        self.created = int(time.time())
        self.routes: dict[str, dict[str, Route]] = {
            "/v1/models": {"GET": self.models},
            "/health": {"GET": self.health},
            "/v1/completions": {"POST": self.completions},
            "/v1/chat/completions": {"POST": self.chat},
            "/debug/probes": {"POST": self.probes},
            "/v1/heads": {"POST": self.heads},
        }

    async def handle(self, ex: Exchange) -> None:
        try:
            await _route(self.routes, ex)(ex)
        except ApiError as exc:
            if not ex.started:
                ex.respond(exc.status, error_body(exc))
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            if not ex.started:
                ex.respond(500, error_body(ApiError(500, f"internal error: {exc!r}")))

    async def models(self, ex: Exchange) -> None:
        self.rt.lifecycle.check_serving()
        model_id = self.served.model_id
        card = {"id": model_id, "object": "model", "created": self.created, "root": model_id}
        card |= {"owned_by": "handoff-sandbox", "max_model_len": self.served.max_model_len}
        _respond_json(ex, {"object": "list", "data": [card]})

    async def health(self, ex: Exchange) -> None:
        status = self.rt.lifecycle.status
        _respond_json(ex, {"status": status}, 200 if status == "ready" else 503)

    async def completions(self, ex: Exchange) -> None:
        self.rt.lifecycle.check_serving()
        body = parse(CompletionRequest, _json_body(ex))
        plan = plan_completion(body, self.served, ex.received_ns)
        GenerationRun(plan, self.rt, ex, ex.received_ns)

    async def chat(self, ex: Exchange) -> None:
        self.rt.lifecycle.check_serving()
        body = parse(ChatRequest, _json_body(ex))
        GenerationRun(plan_chat(body, self.served, ex.received_ns), self.rt, ex, ex.received_ns)

    async def probes(self, ex: Exchange) -> None:
        values = await self._readout("probes", ex)
        _respond_json(ex, {"model": self.served.model_id, "probes": values})

    async def heads(self, ex: Exchange) -> None:
        answers = await self._readout("heads", ex)
        _respond_json(ex, {"model": self.served.model_id, "heads": answers})

    async def _readout(self, kind: str, ex: Exchange) -> dict[str, Any]:
        """One forward pass in the compute process (never on this loop: it paces tokens)."""
        self.rt.lifecycle.check_serving()
        tokens = encode(parse(PromptRequest, _json_body(ex)).prompt)
        with self.rt.lifecycle.tracked():
            return await asyncio.wrap_future(self.rt.engine.link.readout(kind, tokens))


def build_handler(rt: Runtime, served: Served) -> Handler:
    return Api(rt, served).handle


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
