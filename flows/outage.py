"""The in-place outage as it happens: when it began, what is left of the declaration.

Started when the old pods are told to stop, ended when the Endpoints hold the
candidate (swap) or the restored old pods (rollback). Wall-clock seconds, kept in
the ledger, so a resumed run keeps counting from the real start. Every wait inside
the outage is cut to what is left of the estimate; past it the step fails with
DowntimeExceeded and the flow rolls back by itself.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from flows.errors import HandoffError, PermanentError

MIN_WAIT_S = 0.5  # a wait is never cut below this: it still reads the state once


class DowntimeExceeded(PermanentError):
    """The outage reached the declared estimate without a swap."""


@dataclass
class OutageClock:
    started: float  # time.time()
    estimate_s: float
    bound_s: float
    ended: float | None = None

    def elapsed_s(self) -> float:
        return (self.ended or time.time()) - self.started

    def left_s(self) -> float:
        return self.estimate_s - self.elapsed_s()

    @property
    def running(self) -> bool:
        return self.ended is None

    def limit(self, seconds: float) -> float:
        """`seconds`, cut to what is left of the estimate while the outage runs."""
        if not self.running:
            return seconds
        return max(MIN_WAIT_S, min(seconds, self.left_s()))

    def check(self, what: str) -> None:
        if self.running and self.left_s() <= 0:
            raise DowntimeExceeded(self.exceeded(what))

    def exceeded(self, what: str) -> str:
        return (
            f"{what}: the Service has had no endpoints for {self.elapsed_s():.0f} s, the "
            f"declared estimate is {self.estimate_s:.0f} s; rolling back by itself (raise the "
            "parts in the spec or give the candidate a startupProbe if it needs longer)"
        )

    def end(self) -> float:
        if self.ended is None:
            self.ended = time.time()
        return round(self.ended - self.started, 2)

    def text(self) -> str:
        """A line for a person looking at the run during the outage."""
        now = time.time()
        deadline = self.started + self.estimate_s
        return (
            f"**Downtime clock:** no endpoints since {_utc(self.started)} UTC, "
            f"{now - self.started:.0f} s so far (as of {_utc(now)} UTC); the flow rolls back "
            f"by itself at {_utc(deadline)} UTC ({max(0.0, deadline - now):.0f} s left "
            f"of the declared {self.estimate_s:.0f} s)"
        )


def _utc(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%H:%M:%S")


@contextmanager
def bounded(clock: OutageClock | None, what: str) -> Iterator[None]:
    """Run a step inside the outage: refused once the estimate is spent, and a failure
    once it is spent is reported as the declaration running out."""
    if clock is None or not clock.running:
        yield
        return
    clock.check(what)
    try:
        yield
    except HandoffError as exc:
        if clock.running and clock.left_s() <= 0:
            raise DowntimeExceeded(f"{clock.exceeded(what)}; {exc}") from exc
        raise
