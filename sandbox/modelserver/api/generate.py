"""Running one generation request: submit to the engine, then write each event as it comes.

Events arrive on the event loop through the engine's dispatcher and are written from this
callback straight to the connection, so a token's stamp is the moment of its write.
Completions and chat share this path; their differences live in the renderers.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from dataclasses import dataclass, field

from sandbox.modelserver.api.groundtruth import GroundTruth, RequestTiming
from sandbox.modelserver.api.lifecycle import Lifecycle
from sandbox.modelserver.api.metrics import ServerMetrics
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
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    delay_scale: float = 1.0  # real seconds per simulated second a request asks to last


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class GenerationRun:
    def __init__(self, gen: Generation, rt: Runtime, ex: Exchange, t_recv_ns: int) -> None:
        self.gen, self.rt, self.ex, self.t_recv_ns = gen, rt, ex, t_recv_ns
        self.stamps: list[int] = []
        self.tokens: list[TokenOut] = []
        self.token_ns: list[int] = []  # when each token came from the engine (TPOT)
        self.opened = False
        self.closed = False
        self._keep_alive: asyncio.TimerHandle | None = None
        self._held: collections.deque[Event] = collections.deque()
        self._hold_ns = int(gen.duration_s * rt.delay_scale * 1e9)
        self._events = 0
        rt.lifecycle.enter()
        rt.metrics.submitted(len(gen.request.prompt))
        ex.on_lost = self._lost
        if gen.stream:
            ex.start_stream("text/event-stream")
            self._schedule_keep_alive()
        self.seq = rt.engine.submit(gen.request, self.on_event)

    def on_event(self, event: Event) -> None:
        """Each event as it comes, or, for a generation asked to last `duration_s`, at its
        share of that time (the last one at its end), in order."""
        if self.closed or not self._hold_ns:
            self._handle(event)
            return
        self._events += 1
        share = (
            1.0 if event.finish_reason is not None else self._events / self.gen.request.max_tokens
        )
        due_ns = self.t_recv_ns + int(self._hold_ns * min(share, 1.0))
        self._held.append(event)
        delay_s = max(0.0, (due_ns - time.monotonic_ns()) / 1e9)
        asyncio.get_running_loop().call_later(delay_s, self._release)

    def _release(self) -> None:
        self._handle(self._held.popleft())

    def _handle(self, event: Event) -> None:
        if self.closed:
            return
        if isinstance(event, TokenEvent):
            if not self.tokens:
                self.rt.metrics.first_token((time.monotonic_ns() - self.t_recv_ns) / 1e9)
            self.tokens.append(event.token)
            self.token_ns.append(time.monotonic_ns())
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
        self.rt.metrics.ended(
            started=bool(self.tokens), reason=finish_reason, stamps_ns=self.token_ns
        )
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
