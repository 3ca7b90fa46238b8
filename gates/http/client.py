"""Streaming over httpx: the fallback transport, for `https://` servers and HTTP proxies.

The load generator's own transport (`gates.http.transport`) speaks plain HTTP/1.1 only; this one
trades per-chunk cost (httpx → httpcore → h11 → anyio is about 100 µs of Python per read at
64 streams) for TLS and proxy support. Clock rules are the same (notes/gates.md): `t_send`
is stamped by httpcore's trace hook as the request headers start onto the wire, each read is
stamped with `perf_counter_ns` as it arrives, and payloads are interpreted after the stream
ends (`gates.http.finish`). Each stream owns a single-connection client: one shared pool made 64
simultaneous streams wait ~0.6 s inside the pool.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from gates.http.finish import EVENTS, RawStream
from gates.http.records import RequestRecord
from gates.http.sse import SseDecoder, SseError

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
JSON_HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}


def stall_message(stall_s: float) -> str:
    return f"stalled after {EVENTS} token events: no token event for {stall_s:g} s"


class HttpxStream:
    """One stream on its own httpx client; the pool's watchdog calls `check` to end a stall."""

    def __init__(self, base_url: str, *, read_timeout_s: float, proxy: str | None) -> None:
        self._client = httpx.AsyncClient(
            base_url=base_url,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            timeout=httpx.Timeout(read_timeout_s, connect=10.0),
            proxy=proxy,
            trust_env=False,
        )
        self.progress_ns = 0  # last data event (or send) of the request in flight
        self.busy = False
        self._timeout: asyncio.Timeout | None = None

    async def aclose(self) -> None:
        await self._client.aclose()

    def check(self, now_ns: int, stall_ns: int) -> None:
        if self.busy and self._timeout is not None and now_ns - self.progress_ns > stall_ns:
            self._timeout.reschedule(asyncio.get_running_loop().time())

    async def send(
        self, path: str, body: bytes, record: RequestRecord, *, stall_s: float
    ) -> RawStream:
        async def trace(name: str, info: dict[str, Any]) -> None:
            if name.endswith("send_request_headers.started"):
                record.t_send_ns = self.progress_ns = time.perf_counter_ns()

        raw = RawStream()
        self.busy, self.progress_ns = True, time.perf_counter_ns()
        record.t_queued_ns = self.progress_ns
        try:
            async with asyncio.timeout(None) as self._timeout:
                extensions = {"trace": trace}
                request = self._client.stream(
                    "POST", path, content=body, headers=JSON_HEADERS, extensions=extensions
                )
                async with request as resp:
                    record.t_headers_ns = time.perf_counter_ns()
                    record.status = resp.status_code
                    if resp.status_code != 200:
                        detail = (await resp.aread())[:300].decode(errors="replace")
                        raw.failure = f"HTTP {resp.status_code} from {path}: {detail}"
                    else:
                        await self._read(resp, raw)
        except TimeoutError:
            raw.failure = stall_message(stall_s)
        except httpx.HTTPError as exc:
            raw.failure = f"{type(exc).__name__} after {EVENTS} token events: {exc}"
        except SseError as exc:
            raw.failure = f"{exc} (after {EVENTS} token events)"
        finally:
            self.busy, self._timeout = False, None
        record.t_end_ns = time.perf_counter_ns()
        return raw

    async def _read(self, response: httpx.Response, raw: RawStream) -> None:
        decoder = SseDecoder()
        async for data in response.aiter_raw():
            arrived_ns = time.perf_counter_ns()  # stamp first: decoding must not delay it
            payloads = decoder.feed(data)
            if payloads:
                self.progress_ns = arrived_ns
                raw.events += [(arrived_ns, payload) for payload in payloads]
        raw.events += [(time.perf_counter_ns(), payload) for payload in decoder.close()]
        raw.comments = decoder.comments
