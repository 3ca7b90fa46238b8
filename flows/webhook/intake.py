"""A delivery's body, read within the relay's limits, before its signature is checked.

Until the signature is checked a body is anyone's, so what the relay holds for it is
bounded: each body by `max_body_bytes` (413, at once when its Content-Length says more),
the bytes actually received and not yet stored by a budget for all peers
(`max_buffered_bytes`) and one for each peer address (`max_peer_buffered_bytes`; over
either: 503), and the time to receive a body by `body_timeout_s` (408; a body shorter
than its Content-Length or sent a byte at a time ends there). A Content-Length is a
claim, not bytes: charging it would let idle connections that claim megabytes hold the
budget that signed deliveries need. Each of these answers closes the connection, so the
rest of a refused body is never read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.requests import ClientDisconnect, Request


class Refused(Exception):
    """The body was not taken: the status, outcome and detail of the answer."""

    def __init__(self, status: int, outcome: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.outcome, self.detail = status, outcome, detail


class ByteBudget:
    """Bytes held by all bodies at once, and by each peer's (the event loop is the only
    user: no lock)."""

    def __init__(self, limit: int, peer_limit: int) -> None:
        self.limit, self.peer_limit, self.held = limit, peer_limit, 0
        self.by_peer: dict[str, int] = {}

    def take(self, peer: str, size: int) -> None:
        mine = self.by_peer.get(peer, 0)
        if mine + size > self.peer_limit:
            raise Refused(
                503,
                "busy",
                f"{mine} bytes of request bodies from {peer} buffered, the relay's cap per "
                f"address is {self.peer_limit}; retry later",
            )
        if self.held + size > self.limit:
            raise Refused(
                503,
                "busy",
                f"{self.held} bytes of request bodies buffered, the relay's cap is "
                f"{self.limit}; retry later",
            )
        self.held += size
        self.by_peer[peer] = mine + size

    def give(self, peer: str, size: int) -> None:
        self.held -= size
        left = self.by_peer.pop(peer, 0) - size
        if left:
            self.by_peer[peer] = left


class _Hold:
    """One body's share of the budget, grown as it arrives and given back at the end."""

    def __init__(self, budget: ByteBudget, peer: str) -> None:
        self.budget, self.peer, self.size = budget, peer, 0

    def grow_to(self, size: int) -> None:
        if size > self.size:
            self.budget.take(self.peer, size - self.size)
            self.size = size

    def release(self) -> None:
        self.budget.give(self.peer, self.size)
        self.size = 0


@asynccontextmanager
async def body_of(
    request: Request, *, max_bytes: int, timeout_s: float, budget: ByteBudget
) -> AsyncIterator[bytes]:
    """The whole body, counted against budget until the block ends; Refused otherwise."""
    hold = _Hold(budget, request.client.host if request.client else "-")
    try:
        try:
            async with asyncio.timeout(timeout_s):
                body = await _read(request, max_bytes, hold)
        except TimeoutError:
            raise Refused(
                408, "too-slow", f"the body did not arrive within {timeout_s:g} s; send it again"
            ) from None
        except ClientDisconnect:
            raise Refused(400, "malformed", "the client left before the end of the body") from None
        yield body
    finally:
        hold.release()


async def _read(request: Request, max_bytes: int, hold: _Hold) -> bytes:
    declared = request.headers.get("content-length", "")
    too_large = Refused(413, "too-large", f"body exceeds {max_bytes} bytes")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        hold.grow_to(size)
        chunks.append(chunk)
    return b"".join(chunks)
