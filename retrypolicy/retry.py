"""One retry policy for everything a step asks of the apiserver and the registry.

What is retried: an answer that says "not now" (429, 5xx), no answer at all (refused
connection, reset, timeout) and, where the caller re-reads before writing again, a 409
conflict. How: exponential backoff with jitter (retrypolicy/backoff.py), at least what a
Retry-After header asks, each retry logged with what failed and when the next try is;
bounded in time: after HANDOFF_RETRY_S seconds (default 30) of failures, or the caller's
own request timeout if shorter, the last error is raised to the step, which fails or
rolls back as it would have. Everything else (403, 404, 422, a bad manifest) is raised
at once.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from retrypolicy.backoff import compute_delay, compute_sleep, draw

T = TypeVar("T")
# The logger keeps the name the README documents and operators filter on.
log = logging.getLogger("flows.retry")


@dataclass(frozen=True)
class RetryPolicy:
    budget_s: float  # retries stop once this long has passed since the first try
    first_s: float = 0.2
    cap_s: float = 5.0


def policy(budget_s: float | None = None) -> RetryPolicy:
    """The policy, its budget from HANDOFF_RETRY_S unless the caller bounds it tighter."""
    configured = float(os.environ.get("HANDOFF_RETRY_S", "30"))
    return RetryPolicy(budget_s=configured if budget_s is None else min(budget_s, configured))


class Retry(Exception):
    """Raised by an attempt that may be retried; wait at least `after_s` (Retry-After)."""

    def __init__(self, cause: BaseException, *, after_s: float = 0.0, note: str = "") -> None:
        super().__init__(note or str(cause))
        self.cause, self.after_s = cause, after_s


def retry_after(value: str | None) -> float:
    """Seconds from a Retry-After header (the delta form; a date or junk counts as 0)."""
    try:
        return max(0.0, float(value or 0))
    except ValueError:
        return 0.0


def with_retries(attempt: Callable[[], T], *, what: str, rules: RetryPolicy | None = None) -> T:
    """attempt() until it returns, raises anything but Retry, or the budget is spent
    (then Retry's cause is raised)."""
    rules = rules or policy()
    deadline = time.monotonic() + rules.budget_s
    for tries in range(1_000_000):
        try:
            return attempt()
        except Retry as retry:
            left = deadline - time.monotonic()
            delay = max(
                retry.after_s,
                compute_delay(tries, first_s=rules.first_s, cap_s=rules.cap_s, u=draw()),
            )
            if left <= 0 or delay > left:
                log.warning(
                    "%s: giving up after %d tries in %.1f s: %s",
                    what, tries + 1, rules.budget_s - left, retry,
                )  # fmt: skip
                raise retry.cause  # noqa: B904 (its own __cause__ is kept)
            log.warning(
                "%s: %s; try %d in %.2f s (retrying for %.0f s more)",
                what, retry, tries + 2, delay, left,
            )  # fmt: skip
            time.sleep(compute_sleep(delay, left))
    raise AssertionError("unreachable")
