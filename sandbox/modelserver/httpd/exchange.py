"""One request and its response, written straight to the connection's transport."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from sandbox.modelserver.httpd.wire import LAST_CHUNK, RequestHead, chunk, response_head


class Exchange:
    """The handler's view of a request. Every write returns the `time.monotonic_ns()` stamp
    taken just before the bytes were handed to the transport."""

    def __init__(
        self,
        head: RequestHead,
        body: bytes,
        transport: asyncio.Transport,
        on_done: Callable[[Exchange], None],
    ) -> None:
        self.head = head
        self.body = body
        self.received_ns = time.monotonic_ns()  # the whole request has been read
        self._transport = transport
        self._on_done = on_done
        self.started = False
        self.done = False
        self.on_lost: Callable[[], None] | None = None  # the client went away mid-response
        # Served during a drain on a connection opened before it: answered as usual, with
        # `connection: close`, and the connection ends after it.
        self.last = False
        self.status: int | None = None  # once a response has begun

    def respond(
        self, status: int, body: bytes, content_type: str | None = "application/json"
    ) -> int:
        self.status = status
        headers = [("content-type", content_type)] if content_type else []
        headers.append(("content-length", str(len(body))))
        headers += self._connection_header()
        stamp = self._write(response_head(status, headers) + body)
        self._finish()
        return stamp

    def start_stream(self, content_type: str) -> None:
        self.status = 200
        headers = [("content-type", content_type), ("cache-control", "no-cache")]
        headers += [("transfer-encoding", "chunked"), *self._connection_header()]
        self._write(response_head(200, headers))

    def send_chunk(self, data: bytes) -> int:
        return self._write(chunk(data))

    def end_stream(self) -> None:
        self._write(LAST_CHUNK)
        self._finish()

    def end_stream_with(self, *payloads: bytes) -> int:
        """The last chunks and the end of the stream in one write (one system call)."""
        stamp = self._write(b"".join(map(chunk, payloads)) + LAST_CHUNK)
        self._finish()
        return stamp

    def connection_lost(self) -> None:
        if not self.done:
            self.done = True
            if self.on_lost is not None:
                self.on_lost()

    def _connection_header(self) -> list[tuple[str, str]]:
        return [] if self.head.keep_alive and not self.last else [("connection", "close")]

    def _write(self, data: bytes) -> int:
        self.started = True
        stamp = time.monotonic_ns()
        if not self._transport.is_closing():
            self._transport.write(data)
        return stamp

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self._on_done(self)
