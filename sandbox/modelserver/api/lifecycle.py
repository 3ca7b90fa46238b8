"""Whether the server takes requests: starting (cold start), ready, or draining (SIGTERM).

Draining refuses new work with 503 while requests already accepted run to the end; the
server exits once none is left.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from sandbox.modelserver.api.errors import ApiError


class Lifecycle:
    def __init__(self, *, cold_start_ns: int) -> None:
        self.cold_start_ns = cold_start_ns
        self.ready_at_ns = time.monotonic_ns() + cold_start_ns
        self.draining = False
        self.in_flight = 0

    def listening(self) -> None:
        """The cold start counts from when the server can first be asked."""
        self.ready_at_ns = time.monotonic_ns() + self.cold_start_ns

    @property
    def status(self) -> str:
        if self.draining:
            return "draining"
        return "ready" if time.monotonic_ns() >= self.ready_at_ns else "starting"

    def check_serving(self, *, last: bool = False) -> None:
        """Raise 503 unless serving; `last`: the request ends a connection open before a
        drain began, and is answered as usual."""
        status = self.status
        if status == "starting":
            wait_s = (self.ready_at_ns - time.monotonic_ns()) / 1e9
            raise ApiError(503, f"model is still loading (about {wait_s:.1f} s left); retry later")
        if status == "draining" and not last:
            raise ApiError(503, "server is shutting down; send the request to another replica")

    def enter(self) -> None:
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1

    @contextmanager
    def tracked(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def begin_drain(self) -> None:
        self.draining = True

    @property
    def drained(self) -> bool:
        return self.draining and self.in_flight == 0
