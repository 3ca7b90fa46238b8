"""Exponential back-off for container restarts and image pulls, as the kubelet keeps it.

Kubernetes' flowcontrol.Backoff: the first retry is immediate and sets the delay to
the initial value; each retry inside the window doubles it up to the cap; an entry not
touched for twice the cap starts over. The kubelet uses 10 s doubling to 300 s; the
sandbox multiplies both by its time scale (never below MIN_INITIAL_S), so a crash loop
shows several restarts within seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

INITIAL_S = 10.0
CAP_S = 300.0
MIN_INITIAL_S = 0.5


@dataclass
class Backoff:
    """One container's (or one image's) back-off entry. Times are monotonic seconds."""

    initial_s: float
    cap_s: float
    delay_s: float | None = None  # None: no entry yet
    updated_at: float = 0.0

    @classmethod
    def scaled(cls, time_scale: float) -> Backoff:
        initial = max(INITIAL_S * time_scale, MIN_INITIAL_S)
        return cls(initial_s=initial, cap_s=max(CAP_S * time_scale, initial))

    def retry_at(self, failed_at: float) -> float:
        """When something that failed at ``failed_at`` may be tried again."""
        if self.delay_s is None or self._expired(failed_at):
            return failed_at
        return failed_at + self.delay_s

    def record_attempt(self, now: float) -> None:
        """Note a retry at ``now``: the next failure then waits longer."""
        if self.delay_s is None or self._expired(now):
            self.delay_s = self.initial_s
        else:
            self.delay_s = min(self.delay_s * 2, self.cap_s)
        self.updated_at = now

    def _expired(self, now: float) -> bool:
        return now - self.updated_at > 2 * self.cap_s
