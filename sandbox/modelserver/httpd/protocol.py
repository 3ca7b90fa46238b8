"""The per-connection protocol: reads requests one at a time and hands them to the handler."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from sandbox.modelserver.httpd.exchange import Exchange
from sandbox.modelserver.httpd.wire import (
    CONTINUE,
    HEAD_END,
    MAX_HEAD_BYTES,
    BadRequest,
    RequestHead,
    parse_head,
)

Handler = Callable[[Exchange], Coroutine[Any, Any, None]]  # run as a task
BadRequestResponse = Callable[[BadRequest], bytes]  # a complete response that closes


class HttpProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive; a pipelined request waits until the previous one is done."""

    def __init__(
        self, handler: Handler, bad_request: BadRequestResponse, live: set[HttpProtocol]
    ) -> None:
        self._handler = handler
        self._bad_request = bad_request
        self._live = live
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._current: Exchange | None = None
        self._continued = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._draining = False  # a drain began while this connection was open
        self._idle_s = 0.0
        self._idle_close: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> bool:
        return self._current is None

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def close_after_response(self) -> None:
        """Answer what comes, but keep the connection no longer than one response."""
        self._closing = True

    def close_when_idle(self) -> None:
        """Close now if no request is being answered, else right after its response."""
        self.close_after_response()
        if self.idle:
            self.close()

    def drain(self, idle_s: float) -> None:
        """End the connection without racing the client: its next request is answered
        as usual with `connection: close` (a response already under way ends as it
        began, and the connection waits for that next request), and a connection idle
        for idle_s is closed. Closing right after a streamed response instead would meet
        the request the client sends next on it: a reset it cannot tell from a failure."""
        self._draining, self._idle_s = True, idle_s
        if self.idle:
            self._close_if_idle()

    def _close_if_idle(self) -> None:
        if self._idle_close is not None:
            self._idle_close.cancel()
        self._idle_close = asyncio.get_running_loop().call_later(self._idle_s, self.close)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        # Tokens are small writes: without TCP_NODELAY the first one of a response on a
        # kept-alive connection waits for the client's delayed ACK (~20-40 ms of TTFT).
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._live.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._live.discard(self)
        if self._current is not None:
            self._current.connection_lost()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._advance()

    def _advance(self) -> None:
        """Start the next buffered request, once the previous one is answered."""
        if self._current is not None or self._transport is None:
            return
        try:
            request = self._take_request()
        except BadRequest as exc:
            self._reject(exc)
            return
        if request is None:
            return
        self._current = Exchange(*request, self._transport, self._done)
        if self._draining:
            self._current.last = True
            if self._idle_close is not None:
                self._idle_close.cancel()
        task = asyncio.get_running_loop().create_task(self._handler(self._current))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _take_request(self) -> tuple[RequestHead, bytes] | None:
        """The next complete request (head and body) off the buffer, or None for now."""
        end = self._buffer.find(HEAD_END)
        if end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise BadRequest("request head too large")
            return None
        head = parse_head(bytes(self._buffer[:end]))
        start = end + len(HEAD_END)
        stop = start + head.content_length()
        if len(self._buffer) < stop:
            if head.expects_continue and not self._continued and self._transport is not None:
                self._continued = True  # curl waits a second for this before a large body
                self._transport.write(CONTINUE)
            return None
        body = bytes(self._buffer[start:stop])
        del self._buffer[:stop]
        self._continued = False
        return head, body

    def _done(self, exchange: Exchange) -> None:
        self._current = None
        if not exchange.head.keep_alive or self._closing or exchange.last:
            self.close()
        else:
            self._advance()
            if self._draining and self._current is None:
                self._close_if_idle()

    def _reject(self, exc: BadRequest) -> None:
        """A request that cannot be framed: answer it and close (the stream is out of sync)."""
        if self._transport is not None:
            self._transport.write(self._bad_request(exc))
            self._transport.close()
