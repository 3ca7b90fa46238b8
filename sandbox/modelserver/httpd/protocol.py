"""The per-connection protocol: reads requests one at a time and hands them to the handler."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sandbox.modelserver.httpd.exchange import Exchange
from sandbox.modelserver.httpd.wire import (
    CONTINUE,
    HEAD_END,
    MAX_HEAD_BYTES,
    BadRequest,
    parse_head,
)

Handler = Callable[[Exchange], Awaitable[None]]
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

    @property
    def idle(self) -> bool:
        return self._current is None

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._live.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._live.discard(self)
        if self._current is not None:
            self._current.connection_lost()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._advance()

    def _advance(self) -> None:
        if self._current is not None or self._transport is None:
            return
        end = self._buffer.find(HEAD_END)
        if end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                self._reject(BadRequest("request head too large", status=400))
            return
        try:
            head = parse_head(bytes(self._buffer[:end]))
            length = head.content_length()
        except BadRequest as exc:
            self._reject(exc)
            return
        if len(self._buffer) < end + 4 + length:
            if head.expects_continue and not self._continued:
                self._continued = True
                self._transport.write(CONTINUE)
            return
        body = bytes(self._buffer[end + 4 : end + 4 + length])
        del self._buffer[: end + 4 + length]
        self._continued = False
        self._current = Exchange(head, body, self._transport, self._done)
        task = asyncio.get_running_loop().create_task(self._handler(self._current))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _done(self, exchange: Exchange) -> None:
        self._current = None
        if not exchange.head.keep_alive:
            self.close()
        else:
            self._advance()

    def _reject(self, exc: BadRequest) -> None:
        """A request that cannot be framed: answer it and close (the stream is out of sync)."""
        if self._transport is not None:
            self._transport.write(self._bad_request(exc))
            self._transport.close()
