"""The HTTP surface: OpenAI-compatible endpoints plus /health, /debug/probes and /v1/heads,
or candle-vllm's few routes (sandbox.modelserver.surface), and /metrics in the dialect the
server speaks (sandbox.modelserver.api.metrics)."""

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
from sandbox.modelserver.api.metrics import MetricsDialect
from sandbox.modelserver.api.plans import Served, plan_chat, plan_completion
from sandbox.modelserver.api.requests import ChatRequest, CompletionRequest, PromptRequest, parse
from sandbox.modelserver.httpd.exchange import Exchange
from sandbox.modelserver.httpd.protocol import Handler
from sandbox.modelserver.lm.tokenizer import encode
from sandbox.modelserver.surface import CANDLE_VLLM_OWNER, Surface, routed

Route = Callable[[Exchange], Awaitable[None]]


class Api:
    """One handler per route; `handle` dispatches and turns errors into OpenAI-style bodies."""

    def __init__(
        self,
        rt: Runtime,
        served: Served,
        surface: Surface = "openai",
        metrics: MetricsDialect = "vllm",
    ) -> None:
        self.rt = rt
        self.served = served
        self.surface = surface
        self.metrics_dialect = metrics
        self.created = int(time.time())
        routes: dict[str, dict[str, Route]] = {
            "/v1/models": {"GET": self.models},
            "/health": {"GET": self.health},
            "/v1/completions": {"POST": self.completions},
            "/v1/chat/completions": {"POST": self.chat},
            "/debug/probes": {"POST": self.probes},
            "/v1/heads": {"POST": self.heads},
        }
        self.routes = {path: m for path, m in routes.items() if routed(surface, path)}
        if metrics != "none":
            self.routes["/metrics"] = {"GET": self.metrics}
        # A sandbox switch on every surface: from now on every Nth generation fails.
        self.routes["/debug/faults"] = {"POST": self.faults}
        self.fail_every, self._generations = 0, 0

    async def handle(self, ex: Exchange) -> None:
        try:
            await _route(self.routes, ex)(ex)
        except Unrouted as exc:
            if self.surface == "candle-vllm":  # axum's router: status only, empty body
                ex.respond(exc.status, b"", content_type=None)
            else:
                ex.respond(exc.status, error_body(exc))
        except ApiError as exc:
            if not ex.started:
                ex.respond(exc.status, error_body(exc))
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            if not ex.started:
                ex.respond(500, error_body(ApiError(500, f"internal error: {exc!r}")))
        if ex.status is not None and ex.head.path in self.routes:
            self.rt.metrics.answered(ex.head.path, ex.head.method, ex.status)

    async def metrics(self, ex: Exchange) -> None:
        body = self.rt.metrics.render(self.metrics_dialect, self.served.model_id)
        ex.respond(200, body, content_type="text/plain; version=0.0.4; charset=utf-8")

    async def models(self, ex: Exchange) -> None:
        self.rt.lifecycle.check_serving(last=ex.last)
        model_id = self.served.model_id
        card: dict[str, Any] = {"id": model_id, "object": "model"}
        if self.surface == "candle-vllm":  # as its router writes the entry
            card |= {"created": int(time.time() * 1000), "owned_by": CANDLE_VLLM_OWNER}
            card["permission"] = []
        else:
            card |= {"created": self.created, "root": model_id, "owned_by": "handoff-sandbox"}
            card["max_model_len"] = self.served.max_model_len
        _respond_json(ex, {"object": "list", "data": [card]})

    async def health(self, ex: Exchange) -> None:
        status = self.rt.lifecycle.status
        _respond_json(ex, {"status": status}, 200 if status == "ready" else 503)

    async def faults(self, ex: Exchange) -> None:
        """`{"fail_every": N}`: every Nth generation request from now on answers HTTP 500
        (0 stops it), as a server that starts failing under real traffic would."""
        every = _json_body(ex).get("fail_every", 0)
        if not isinstance(every, int) or every < 0:
            raise ApiError(400, f"fail_every must be a whole number >= 0, got {every!r}")
        self.fail_every, self._generations = every, 0
        _respond_json(ex, {"fail_every": every})

    def _injected_failure(self) -> None:
        if self.fail_every:
            self._generations += 1
            if self._generations % self.fail_every == 0:
                raise ApiError(500, f"injected fault: every {self.fail_every}th request fails")

    async def completions(self, ex: Exchange) -> None:
        self.rt.lifecycle.check_serving(last=ex.last)
        self._injected_failure()
        body = parse(CompletionRequest, _json_body(ex))
        plan = plan_completion(body, self.served, ex.received_ns)
        GenerationRun(plan, self.rt, ex, ex.received_ns)

    async def chat(self, ex: Exchange) -> None:
        self.rt.lifecycle.check_serving(last=ex.last)
        self._injected_failure()
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
        self.rt.lifecycle.check_serving(last=ex.last)
        tokens = encode(parse(PromptRequest, _json_body(ex)).prompt)
        with self.rt.lifecycle.tracked():
            return await asyncio.wrap_future(self.rt.engine.link.readout(kind, tokens))


def build_handler(
    rt: Runtime, served: Served, surface: Surface = "openai", metrics: MetricsDialect = "vllm"
) -> Handler:
    return Api(rt, served, surface, metrics).handle


class Unrouted(ApiError):
    """No route for the path (404) or the method (405)."""


def _route(routes: dict[str, dict[str, Route]], ex: Exchange) -> Route:
    methods = routes.get(ex.head.path)
    if methods is None:
        raise Unrouted(404, f"no route {ex.head.path}: the server has {sorted(routes)}")
    if ex.head.method not in methods:
        raise Unrouted(405, f"{ex.head.path} takes {sorted(methods)}, not {ex.head.method}")
    return methods[ex.head.method]


def _respond_json(ex: Exchange, obj: object, status: int = 200) -> None:
    ex.respond(status, json.dumps(obj, separators=(",", ":")).encode())


def _json_body(ex: Exchange) -> Any:
    try:
        return json.loads(ex.body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc
