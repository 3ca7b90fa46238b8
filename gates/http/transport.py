"""The load generator's streaming transport: plain HTTP/1.1 on an `asyncio.Protocol`.

`data_received` takes the `perf_counter_ns` stamp as the read returns and queues the bytes;
once every read of the loop's wake-up is stamped, they are framed (`gates.http.http1`: chunked,
Content-Length or close-delimited) and split into SSE events (`gates.http.sse`); payloads keep
their stamp and are interpreted after the request ends (`gates.http.finish`). httpx spends about
100 µs of Python per read at 64 streams before its stamp, and every stream queued behind that
read waits for it. One keep-alive connection per stream, TCP_NODELAY, reconnect when the
server closes. No TLS and no proxies: `gates.latency.load` uses httpx for those.
"""

from __future__ import annotations

import asyncio
import socket
import time
from urllib.parse import urlsplit

from gates.http.client import stall_message
from gates.http.finish import EVENTS, RawStream
from gates.http.http1 import HttpProtocolError, ResponseParser
from gates.http.records import RequestRecord
from gates.http.sse import DEFAULT_MAX_EVENT_BYTES, SseDecoder, SseError

MAX_ERROR_DETAIL = 300


class _Connection(asyncio.Protocol):
    """One TCP connection; carries one request at a time."""

    def __init__(self, max_event_bytes: int) -> None:
        self._max_event_bytes = max_event_bytes
        self._loop = asyncio.get_running_loop()
        self._inbox: list[tuple[int, bytes]] = []  # stamped reads not yet parsed
        self.transport: asyncio.Transport | None = None
        self.progress_ns = 0  # send or last data event of the request in flight
        self.received = False  # any byte of the current response
        self.used = False  # carried a request before the current one
        self.closed_by_server = False
        self._closed_here = False
        self._waiter: asyncio.Future[None] | None = None
        self._raw = RawStream()
        self._record: RequestRecord | None = None
        self._path = ""
        self._http = ResponseParser()
        self._sse = SseDecoder(max_event_bytes)
        self._ok = False
        self._error_body = b""

    @property
    def open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport = transport

    def start(self, request: bytes, path: str, record: RequestRecord) -> asyncio.Future[None]:
        """Write `request`, stamping `t_send` just before; the future ends with the response."""
        assert self.transport is not None
        self._raw, self._record, self._path = RawStream(), record, path
        self._http, self._sse = ResponseParser(), SseDecoder(self._max_event_bytes)
        self._ok, self._error_body, self.received = False, b"", False
        self._waiter = asyncio.get_running_loop().create_future()
        record.t_send_ns = self.progress_ns = time.perf_counter_ns()
        self.transport.write(request)
        return self._waiter

    @property
    def raw(self) -> RawStream:
        return self._raw

    def data_received(self, data: bytes) -> None:
        # Stamp and queue only: framing and splitting run after every read of this wake-up
        # has been stamped, so one stream's parsing never delays another stream's stamp.
        self._inbox.append((time.perf_counter_ns(), data))
        if len(self._inbox) == 1:
            self._loop.call_soon(self._drain)

    def _drain(self) -> None:
        inbox, self._inbox = self._inbox, []
        for arrived_ns, data in inbox:
            self._take(arrived_ns, data)

    def _take(self, now: int, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: the connection is out of step
            self.close()
            return
        self.received = True
        try:
            body = self._http.feed(data)
            if not self._ok and self._record is not None and self._record.status is None:
                self._take_head(now)
            if body:
                if self._ok:
                    payloads = self._sse.feed(body)
                    if payloads:
                        self.progress_ns = now
                        events = self._raw.events
                        for payload in payloads:
                            events.append((now, payload))
                elif len(self._error_body) < MAX_ERROR_DETAIL:
                    self._error_body += body[: MAX_ERROR_DETAIL - len(self._error_body)]
            if self._http.done:
                self._complete()
        except (HttpProtocolError, SseError) as exc:
            self.fail(f"{exc} (after {EVENTS} token events)")

    def _take_head(self, now: int) -> None:
        head = self._http.head
        if head is None or self._record is None:
            return
        self._record.t_headers_ns, self._record.status = now, head.status
        self._ok = head.status == 200

    def connection_lost(self, exc: Exception | None) -> None:
        self._drain()  # what arrived before the close comes first
        self.transport = None
        self.closed_by_server = not self._closed_here
        if self._waiter is None:
            return
        try:
            self._http.end_of_input()
        except HttpProtocolError as error:
            self.fail(f"{error} (after {EVENTS} token events)")
            return
        self._complete()

    def _complete(self) -> None:
        if self._ok:
            now = time.perf_counter_ns()
            self._raw.events += [(now, payload) for payload in self._sse.close()]
            self._raw.comments = self._sse.comments
        elif self._http.head is not None:
            detail = self._error_body.decode(errors="replace")
            self._raw.failure = f"HTTP {self._http.head.status} from {self._path}: {detail}"
        self._release()
        if not self._http.keep_alive:
            self.close()

    def fail(self, message: str) -> None:
        """End the request in flight with `message` and drop the connection."""
        if self._waiter is not None:
            self._raw.failure = message
            self._release()
        self.close()

    def _release(self) -> None:
        waiter, self._waiter = self._waiter, None
        self.used = True
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        self._closed_here = True
        if self.transport is not None:
            self.transport.close()


class NativeStream:
    """One stream: a keep-alive connection to a plain-HTTP server, reopened when closed."""

    def __init__(self, base_url: str, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        url = urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"{base_url!r}: this transport speaks plain http:// only")
        self._host, self._port = url.hostname, url.port or 80
        self._host_header = url.netloc.rsplit("@", 1)[-1]
        self._prefix = url.path.rstrip("/")
        self._max_event_bytes = max_event_bytes
        self._conn: _Connection | None = None
        self._stall_s = 0.0
        self.busy = False

    async def aclose(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def check(self, now_ns: int, stall_ns: int) -> None:
        conn = self._conn
        if self.busy and conn is not None and now_ns - conn.progress_ns > stall_ns:
            conn.fail(stall_message(self._stall_s))

    def request_bytes(self, path: str, body: bytes) -> bytes:
        head = (
            f"POST {self._prefix}{path} HTTP/1.1\r\nHost: {self._host_header}\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode("latin-1") + body

    async def send(
        self, path: str, body: bytes, record: RequestRecord, *, stall_s: float
    ) -> RawStream:
        """Send one request and wait for its response; failures are recorded, never raised."""
        self.busy, self._stall_s = True, stall_s
        record.t_queued_ns = time.perf_counter_ns()
        request = self.request_bytes(path, body)
        try:
            raw = await self._exchange(request, path, record)
        finally:
            self.busy = False
        record.t_end_ns = time.perf_counter_ns()
        return raw

    async def _exchange(self, request: bytes, path: str, record: RequestRecord) -> RawStream:
        for _ in range(2):
            try:
                async with asyncio.timeout(self._stall_s):
                    conn = await self._connection()
            except (OSError, TimeoutError) as exc:
                why = str(exc) or f"no connection within {self._stall_s:g} s"
                where = f"{self._host}:{self._port}"
                return RawStream(failure=f"ConnectError after {EVENTS} token events: {where} {why}")
            reused = conn.used
            await conn.start(request, path, record)
            raw = conn.raw
            # A kept-alive connection the server closed just as we wrote: once more, fresh.
            if not (reused and conn.closed_by_server and not conn.received):
                return raw
            record.t_send_ns = None
        return raw

    async def _connection(self) -> _Connection:
        if self._conn is not None and self._conn.open:
            return self._conn
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(
            lambda: _Connection(self._max_event_bytes), self._host, self._port
        )
        self._conn = protocol
        return protocol
