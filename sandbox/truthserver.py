"""A truth server for measuring clients: a fixed token cadence that costs (almost) nothing.

`python -m sandbox.truthserver [--port 0] [--interval-ms 25]` serves streaming
`/v1/completions` (OpenAI-compatible SSE, usage and `[DONE]` at the end). Every stream in
flight gets one token per tick of one shared grid, so concurrent streams move in lock-step
as on a batching server; a new request's first token goes out at the next tick. Ticks come
from a timerfd the event loop waits on (`Pacer`), there is no model and no real-time
priority, so the server does not compete with the client it measures. Each token's send time
(`time.monotonic_ns()`, the clock of the client's `perf_counter_ns`) is kept, and
`GET /truth` returns one JSON line per finished request (`RequestTiming`).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import socket
import time
from dataclasses import dataclass, field

from sandbox.modelserver.api.errors import ApiError, error_body, unframeable
from sandbox.modelserver.api.groundtruth import RequestTiming
from sandbox.modelserver.httpd.exchange import Exchange
from sandbox.modelserver.httpd.server import serve_until_drained
from sandbox.modelserver.pacer import Pacer

MODEL_ID = "truth"
_DONE = b"data: [DONE]\n\n"


@dataclass
class _Stream:
    ex: Exchange
    id: str
    n_out: int
    include_usage: bool
    chunk: bytes
    t_recv_ns: int
    stamps: list[int] = field(default_factory=list)


def _tail(stream: _Stream) -> list[bytes]:
    """What follows the last token: the usage chunk if asked for, then [DONE]."""
    if not stream.include_usage:
        return [_DONE]
    usage = {"prompt_tokens": 1, "completion_tokens": stream.n_out}
    chunk: dict[str, object] = {"id": stream.id, "object": "text_completion", "model": MODEL_ID}
    chunk |= {"choices": [], "usage": usage | {"total_tokens": stream.n_out + 1}}
    return [b"data: " + json.dumps(chunk).encode() + b"\n\n", _DONE]


class TruthServer:
    def __init__(self, pacer: Pacer, interval_ns: int) -> None:
        self._pacer = pacer
        self._interval_ns = interval_ns
        self._origin_ns = time.monotonic_ns()
        self._active: dict[str, _Stream] = {}  # by id, in arrival order
        self._tick_due: int | None = None
        self._ids = itertools.count()
        self._finished: list[tuple[_Stream, str]] = []
        self.draining = False

    async def handle(self, ex: Exchange) -> None:
        try:
            route = (ex.head.method, ex.head.path)
            if route == ("POST", "/v1/completions"):
                self._start(ex)
            elif route == ("GET", "/truth"):
                ex.respond(200, self.truth_lines(), "application/jsonl")
            elif route == ("GET", "/v1/models"):
                card = {"id": MODEL_ID, "object": "model", "owned_by": "handoff-sandbox"}
                ex.respond(200, json.dumps({"object": "list", "data": [card]}).encode())
            elif route == ("GET", "/health"):
                ex.respond(200, b'{"status":"ready"}')
            else:
                raise ApiError(404, f"no route {ex.head.method} {ex.head.path}")
        except ApiError as exc:
            ex.respond(exc.status, error_body(exc))

    def _start(self, ex: Exchange) -> None:
        if self.draining:
            raise ApiError(503, "the server is draining")
        try:
            body = json.loads(ex.body)
            n_out = int(body.get("max_tokens") or 16)
        except (ValueError, TypeError, AttributeError) as exc:
            raise ApiError(
                400, f"expected a JSON object with an integer max_tokens: {exc}"
            ) from exc
        if body.get("stream") is not True or n_out < 1:
            raise ApiError(400, "only streaming is served: send stream=true, max_tokens >= 1")
        rid = f"cmpl-truth-{next(self._ids)}"
        payload = {
            "id": rid,
            "object": "text_completion",
            "model": MODEL_ID,
            "choices": [{"index": 0, "text": " tick", "finish_reason": None}],
        }
        chunk = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        stream = _Stream(ex, rid, n_out, include_usage, chunk, ex.received_ns)
        ex.on_lost = lambda: self._finish(stream, "abort")
        ex.start_stream("text/event-stream")
        self._active[rid] = stream
        self._arm()

    def _arm(self) -> None:
        if self._tick_due is not None or not self._active:
            return
        now = time.monotonic_ns()
        ticks = (now - self._origin_ns) // self._interval_ns + 1
        self._tick_due = self._origin_ns + ticks * self._interval_ns
        self._pacer.schedule_threadsafe(self._tick_due, self._tick)

    def _tick(self) -> None:
        self._tick_due = None
        ending = []
        for stream in self._active.values():
            if len(stream.stamps) + 1 < stream.n_out:
                stream.stamps.append(stream.ex.send_chunk(stream.chunk))
            else:  # the last token, usage, [DONE] and the end: one write, one system call
                stream.stamps.append(stream.ex.end_stream_with(stream.chunk, *_tail(stream)))
                ending.append(stream)
        for stream in ending:
            self._finish(stream, "length")
        self._arm()

    def _finish(self, stream: _Stream, finish_reason: str) -> None:
        if self._active.pop(stream.id, None) is not None:
            self._finished.append((stream, finish_reason))  # serialised only when asked for

    def truth_lines(self) -> bytes:
        lines = [
            RequestTiming(
                id=stream.id,
                t_recv_ns=stream.t_recv_ns,
                token_times_ns=stream.stamps,
                n_prompt=1,
                n_out=len(stream.stamps),
                finish_reason=finish_reason,
                stream=True,
            ).model_dump_json()
            + "\n"
            for stream, finish_reason in self._finished
        ]
        return "".join(lines).encode()

    def drained(self) -> bool:
        return self.draining and not self._active

    def begin_drain(self) -> None:
        self.draining = True


async def _serve(sock: socket.socket, interval_ms: float) -> None:
    pacer = Pacer(asyncio.get_running_loop())
    server = TruthServer(pacer, int(interval_ms * 1e6))
    host, port = sock.getsockname()[:2]
    try:
        await serve_until_drained(
            sock,
            server.handle,
            unframeable,
            begin_drain=server.begin_drain,
            drained=server.drained,
            on_listening=lambda: print(f"listening on http://{host}:{port}", flush=True),
        )
    finally:
        pacer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--interval-ms", type=float, default=25.0)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(1024)
    asyncio.run(_serve(sock, args.interval_ms))


if __name__ == "__main__":
    main()
