"""The relay's HTTP server: uvicorn's h11 protocol with the deadlines and the cap it lacks.

uvicorn closes a keep-alive connection that stays idle, but has no deadline for a
request's headers (a connection that opens and sends nothing, or sends a byte a minute,
is held forever) and takes any number of connections. Here:

- headers: from the connection's start, and again after each response, the next
  request's headers must be complete within `header_timeout_s`, else the connection is
  closed; they may take 16 KiB at most (h11 answers 400 to headers still incomplete
  at that size, the app to complete ones over it);
- connections: one beyond `max_connections`, or beyond `max_peer_connections` from one
  address (so one client's idle connections cannot take every slot), is answered 503
  and closed at once;
- idle keep-alive: closed after `keep_alive_s`.

The body's deadline and the bytes held before the signature check are the app's (app.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from typing import Any, cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from flows.webhook.app import MAX_HEADER_BYTES, RelaySettings, create_app

log = logging.getLogger("handoff.webhook")


def _busy_answer(detail: str) -> bytes:
    body = json.dumps({"outcome": "busy", "detail": detail}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"connection: close\r\nretry-after: 5\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def protocol_for(settings: RelaySettings) -> type[H11Protocol]:
    header_timeout_s, cap = settings.header_timeout_s, settings.max_connections
    peer_cap = settings.max_peer_connections
    busy = _busy_answer(f"{cap} connections open, the relay's cap; retry later")
    peer_busy = _busy_answer(
        f"{peer_cap} connections open from this address, the relay's cap per address; retry later"
    )
    by_peer: dict[str, int] = {}  # open connections per address (the event loop's alone)

    class RelayProtocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _refused = False
        _peer: str | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            # A stream server hands a Transport, the type uvicorn's protocol declares and
            # keeps as self.transport; asyncio's protocol declares only the base class.
            super().connection_made(cast(asyncio.Transport, transport))
            peer = self.client[0] if self.client else "-"
            if len(self.connections) > cap:
                log.warning("503 busy: %d connections open, the cap", len(self.connections) - 1)
                self._refuse(busy)
                return
            if by_peer.get(peer, 0) >= peer_cap:
                log.warning("503 busy: %d connections open from %s, the cap", peer_cap, peer)
                self._refuse(peer_busy)
                return
            self._peer = peer
            by_peer[peer] = by_peer.get(peer, 0) + 1
            self._arm()

        def _refuse(self, answer: bytes) -> None:
            self._refused = True
            self.transport.write(answer)
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # this request's headers are in

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE:
                self._arm()  # the next request's headers

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._peer is not None:
                left = by_peer.pop(self._peer) - 1
                if left:
                    by_peer[self._peer] = left
                self._peer = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                log.info("connection closed: no request headers within %g s", header_timeout_s)
                self.transport.close()

    return RelayProtocol


def server_config(settings: RelaySettings, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's configuration for the relay (kwargs: host, port, log_level, …)."""
    return uvicorn.Config(
        create_app(settings),
        http=protocol_for(settings),
        # uvicorn declares an int, but only hands it to loop.call_later: a float works
        timeout_keep_alive=cast(int, settings.keep_alive_s),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        **kwargs,
    )


def serve(settings: RelaySettings, sock: socket.socket | None = None, **kwargs: object) -> None:
    """Serve until interrupted (on sock when given, else on kwargs' host and port)."""
    server = uvicorn.Server(server_config(settings, **kwargs))
    server.run(sockets=[sock] if sock else None)
