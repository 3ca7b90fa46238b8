"""Serving until drained: SIGTERM/SIGINT start a drain, the loop ends once it is complete.

A drain answers requests on connections opened after it with 503, and ends each
connection open before it without a race: its next request is answered as usual with
`connection: close` (one idle for DRAIN_IDLE_S is closed), so clients reconnect (to another
replica) instead of sending a request into a socket the server is closing. The process
ends once no request runs and no connection is left, or, with `abort_after_s` (vLLM's
`--shutdown-timeout`), that long after the signal whatever still runs: its streams are cut.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable

from sandbox.modelserver.httpd.protocol import BadRequestResponse, Handler, HttpProtocol

_POLL_S = 0.02
DRAIN_IDLE_S = 1.0  # longer than a client's pause between requests, far below a grace period


async def serve_until_drained(
    sock: socket.socket,
    handler: Handler,
    bad_request: BadRequestResponse,
    *,
    begin_drain: Callable[[], None],
    drained: Callable[[], bool],
    on_listening: Callable[[], None],
    abort_after_s: float | None = None,
) -> None:
    """Accept connections on `sock` until a signal's drain completes (a second signal, or
    `abort_after_s` after the first: now)."""
    loop = asyncio.get_running_loop()
    live: set[HttpProtocol] = set()
    signals = 0
    signalled_at = 0.0

    def connection() -> HttpProtocol:
        protocol = HttpProtocol(handler, bad_request, live)
        if signals:
            protocol.close_after_response()  # its request gets the drain's 503, then close
        return protocol

    server = await loop.create_server(connection, sock=sock)

    def on_signal() -> None:
        nonlocal signals, signalled_at
        signals += 1
        signalled_at = signalled_at or loop.time()
        begin_drain()
        for protocol in list(live):
            protocol.drain(DRAIN_IDLE_S)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    on_listening()

    def timed_out() -> bool:
        if not signals or abort_after_s is None:
            return False
        return loop.time() - signalled_at >= abort_after_s

    while not ((drained() and not live) or signals > 1 or timed_out()):
        await asyncio.sleep(_POLL_S)
    server.close()
    for protocol in list(live):
        protocol.close()
    await server.wait_closed()
