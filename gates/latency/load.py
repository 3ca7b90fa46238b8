"""Closed-loop load: a fixed number of streams, each sending its next request when the last ends.

A `StreamPool` holds one connection per stream, so connections stay warm across the warm-up
and the measured rounds of a comparison. Streams use the native transport (`gates.http.transport`)
unless the server is `https://` or reached through a proxy: those go over httpx
(`gates.http.client`). One watchdog per pool ends streams that stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from gates.http import sampling
from gates.http.client import CHAT_PATH, COMPLETIONS_PATH, HttpxStream
from gates.http.finish import RawStream, finish_record
from gates.http.records import RequestRecord
from gates.http.transport import NativeStream

Api = Literal["completions", "chat"]
Transport = Literal["native", "httpx"]


@dataclass(frozen=True)
class RequestShape:
    """What every request of a load run asks for: same for baseline and candidate."""

    model: str
    max_tokens: int
    api: Api = "completions"
    seed: int = 0
    # the server takes vLLM/llama.cpp extensions: min_tokens (where ignore_eos is ignored,
    # it keeps the answer at max_tokens) and the full greedy sampling set
    extensions: bool = False

    @property
    def path(self) -> str:
        return COMPLETIONS_PATH if self.api == "completions" else CHAT_PATH

    def body(self, prompt: str) -> dict[str, Any]:
        """Greedy, fixed-length streaming request with usage reported at the end."""
        body: dict[str, Any] = sampling.neutral(extended=self.extensions) | {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "ignore_eos": True,
            "seed": self.seed,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.extensions:
            body["min_tokens"] = self.max_tokens
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body


@dataclass(frozen=True)
class Run:
    """The records of one closed-loop run and its span (first send to last end)."""

    records: list[RequestRecord]
    t_start_ns: int
    t_end_ns: int

    @property
    def duration_s(self) -> float:
        return (self.t_end_ns - self.t_start_ns) / 1e9


class Stream(Protocol):
    busy: bool

    async def send(
        self, path: str, body: bytes, record: RequestRecord, *, stall_s: float
    ) -> RawStream: ...

    def check(self, now_ns: int, stall_ns: int) -> None: ...

    async def aclose(self) -> None: ...


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No automatic garbage collection while streams are stamped: a collection stops every
    stream at once, and a full one walks every record of the run. A run is bounded in
    requests, so what it allocates meanwhile is bounded too; it is collected afterwards."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def pick_transport(base_url: str, wanted: Transport, proxy: str | None) -> Transport:
    """The native transport where it can go: plain http:// straight to the server."""
    if wanted == "native" and (urlsplit(base_url).scheme != "http" or proxy):
        return "httpx"
    return wanted


class StreamPool:
    """`concurrency` streams against one server, each with its own connection."""

    def __init__(
        self,
        base_url: str,
        *,
        concurrency: int,
        read_timeout_s: float,
        transport: Transport = "native",
        proxy: str | None = None,
    ) -> None:
        self.base_url = base_url
        self.concurrency = concurrency
        self.transport = pick_transport(base_url, transport, proxy)
        self._proxy = proxy
        self._stall_s = read_timeout_s
        self._streams: list[Stream] = []
        self._watchdog: asyncio.Task[None] | None = None

    def _new_stream(self) -> Stream:
        if self.transport == "native":
            return NativeStream(self.base_url)
        return HttpxStream(self.base_url, read_timeout_s=self._stall_s, proxy=self._proxy)

    async def __aenter__(self) -> StreamPool:
        self._streams = [self._new_stream() for _ in range(self.concurrency)]
        self._watchdog = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        for stream in self._streams:
            await stream.aclose()

    async def _watch(self) -> None:
        """Every quarter of the stall limit, end the streams without a data event for longer
        (SSE comments are not progress: candle-vllm sends keep-alives while stalled)."""
        stall_ns = int(self._stall_s * 1e9)
        while True:
            await asyncio.sleep(min(self._stall_s / 4, 1.0))
            now_ns = time.perf_counter_ns()
            for stream in self._streams:
                stream.check(now_ns, stall_ns)

    async def run(
        self,
        shape: RequestShape,
        prompts: Sequence[str],
        *,
        n_requests: int,
        label: str = "",
        round_index: int = 0,
    ) -> Run:
        """Send `n_requests` requests, prompts cycled in order, `concurrency` at a time."""
        queue = iter(range(n_requests))
        bodies = [json.dumps(shape.body(prompt)).encode() for prompt in prompts]
        finished: list[tuple[RequestRecord, RawStream]] = []
        t_start_ns = time.perf_counter_ns()

        async def worker(stream: Stream) -> None:
            for index in queue:  # shared iterator: each index is taken exactly once
                record = RequestRecord(
                    index=index, label=label, round=round_index, expected_tokens=shape.max_tokens
                )
                body = bodies[index % len(bodies)]
                raw = await stream.send(shape.path, body, record, stall_s=self._stall_s)
                finished.append((record, raw))

        with _collector_paused():
            await asyncio.gather(*(worker(stream) for stream in self._streams))
        # Payloads are interpreted only now, when no stream is waiting to be stamped.
        records = sorted((finish_record(r, raw) for r, raw in finished), key=lambda r: r.index)
        sent = [r.t_send_ns for r in records if r.t_send_ns is not None]
        t_end_ns = max((r.t_end_ns or 0 for r in records), default=time.perf_counter_ns())
        return Run(records, min(sent, default=t_start_ns), t_end_ns)
