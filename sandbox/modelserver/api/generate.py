"""Running one generation request: submit to the engine, then write each event as it comes.

Events arrive on the event loop through the engine's dispatcher and are written from this
callback straight to the connection, so a token's stamp is the moment of its write.
Completions and chat share this path; their differences live in the renderers.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from sandbox.modelserver.api.groundtruth import GroundTruth, RequestTiming
from sandbox.modelserver.api.lifecycle import Lifecycle
from sandbox.modelserver.api.plans import Generation
from sandbox.modelserver.engine.engine import Engine
from sandbox.modelserver.engine.sequence import Event, TokenEvent
from sandbox.modelserver.httpd.exchange import Exchange
from sandbox.modelserver.lm.sampling import TokenOut

_KEEP_ALIVE = b": keep-alive\n\n"
_DONE = b"data: [DONE]\n\n"


@dataclass
class Runtime:
    """What a generation needs from the server."""

    engine: Engine
    lifecycle: Lifecycle
    ground_truth: GroundTruth
    keep_alive_s: float | None


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class GenerationRun:
    def __init__(self, gen: Generation, rt: Runtime, ex: Exchange, t_recv_ns: int) -> None:
        self.gen, self.rt, self.ex, self.t_recv_ns = gen, rt, ex, t_recv_ns
        self.stamps: list[int] = []
        self.tokens: list[TokenOut] = []
        self.opened = False
        self.closed = False
        self._keep_alive: asyncio.TimerHandle | None = None
        rt.lifecycle.enter()
        ex.on_lost = self._lost
        if gen.stream:
            ex.start_stream("text/event-stream")
            self._schedule_keep_alive()
        self.seq = rt.engine.submit(gen.request, self.on_event)

    def on_event(self, event: Event) -> None:
        if self.closed:
            return
        if isinstance(event, TokenEvent):
            self.tokens.append(event.token)
        if self.gen.stream:
            self._stream(event)
        elif event.finish_reason is not None:
            self._respond(event.finish_reason)

    def _stream(self, event: Event) -> None:
        renderer = self.gen.renderer
        if not self.opened:
            self.opened = True
            for chunk in renderer.opening(self.seq.prompt_logprobs):
                self._send_sse(chunk)
        stamp = self._send_sse(renderer.chunk(event))
        if isinstance(event, TokenEvent):
            self.stamps.append(stamp)
        if event.finish_reason is None:
            return
        if self.gen.include_usage:
            self._send_sse(renderer.usage_chunk(len(self.tokens)))
        self.ex.send_chunk(_DONE)
        self.ex.end_stream()
        self._close(event.finish_reason)

    def _respond(self, finish_reason: str) -> None:
        body = self.gen.renderer.body(self.tokens, finish_reason, self.seq.prompt_logprobs)
        stamp = self.ex.respond(200, _json(body))
        self.stamps = [stamp] * len(self.tokens)
        self._close(finish_reason)

    def _send_sse(self, chunk: object) -> int:
        return self.ex.send_chunk(b"data: " + _json(chunk) + b"\n\n")

    def _schedule_keep_alive(self) -> None:
        if self.rt.keep_alive_s is not None:
            loop = asyncio.get_running_loop()
            self._keep_alive = loop.call_later(self.rt.keep_alive_s, self._send_keep_alive)

    def _send_keep_alive(self) -> None:
        # Sent on a fixed period, like candle-vllm, whether or not tokens flowed meanwhile.
        if not self.closed:
            self.ex.send_chunk(_KEEP_ALIVE)
            self._schedule_keep_alive()

    def _lost(self) -> None:
        self.rt.engine.abort(self.seq)
        self._close("abort")

    def _close(self, finish_reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        if self._keep_alive is not None:
            self._keep_alive.cancel()
        self.rt.lifecycle.leave()
        self.rt.ground_truth.record(
            RequestTiming(
                id=self.gen.renderer.id,
                t_recv_ns=self.t_recv_ns,
                token_times_ns=self.stamps,
                n_prompt=len(self.gen.request.prompt),
                n_out=len(self.stamps),
                finish_reason=finish_reason,
                stream=self.gen.stream,
            )
        )
