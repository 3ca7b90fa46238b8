"""One retry policy for everything a step asks of the apiserver and the registry.

What is retried: an answer that says "not now" (429, 5xx), no answer at all (refused
connection, reset, timeout) and, where the caller re-reads before writing again, a 409
conflict. How: exponential backoff with jitter (retrypolicy/backoff.py), at least what a
Retry-After header asks, each retry logged with what failed and when the next try is;
bounded in time: after HANDOFF_RETRY_S seconds (default 30) of failures, or the caller's
own request timeout if shorter, the last error is raised to the step, which fails or
rolls back as it would have. A caller may bound the retries by a deadline of its own as
well, asked again before every try and during every wait (`until`: a fenced write's
Lease, flows/kube/client.py): no try starts after it, and at it the caller decides
(it raises, e.g. LeaseLost, or gives a later deadline). Everything else (403, 404, 422,
a bad manifest) is raised at once.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from retrypolicy.backoff import compute_delay, compute_sleep, draw

T = TypeVar("T")
# The logger keeps the name the docs (docs/concepts.md) document and operators filter on.
log = logging.getLogger("flows.retry")


@dataclass(frozen=True)
class RetryPolicy:
    budget_s: float  # retries stop once this long has passed since the first try
    first_s: float = 0.2
    cap_s: float = 5.0
    # The caller's own deadline (a time.monotonic()), asked again before each retry and
    # at least every POLL_S while waiting for it: no try starts at or after it. It may
    # raise to stop the retries (then that error is raised); a deadline that has passed
    # without a raise ends them as the budget does.
    until: Callable[[], float] | None = None


POLL_S = 1.0  # how often a wait asks `until` again


def policy(
    budget_s: float | None = None, *, until: Callable[[], float] | None = None
) -> RetryPolicy:
    """The policy, its budget from HANDOFF_RETRY_S unless the caller bounds it tighter;
    `until`: the caller's own deadline besides (see RetryPolicy)."""
    configured = float(os.environ.get("HANDOFF_RETRY_S", "30"))
    budget = configured if budget_s is None else min(budget_s, configured)
    return RetryPolicy(budget_s=budget, until=until)


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
    """attempt() until it returns, raises anything but Retry, or the budget (or the
    rules' own deadline, `until`) is spent: then Retry's cause is raised, unless `until`
    raises an error of its own."""
    rules = rules or policy()
    started = time.monotonic()
    deadline = started + rules.budget_s
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
                _give_up(what, tries, started, retry)
            log.warning(
                "%s: %s; try %d in %.2f s (retrying for %.0f s more)",
                what, retry, tries + 2, delay, left,
            )  # fmt: skip
            if rules.until is None:
                time.sleep(compute_sleep(delay, left))
            elif not _wait_within(rules.until, delay):
                _give_up(what, tries, started, retry)
    raise AssertionError("unreachable")


def _give_up(what: str, tries: int, started: float, retry: Retry) -> NoReturn:
    log.warning(
        "%s: giving up after %d tries in %.1f s: %s",
        what, tries + 1, time.monotonic() - started, retry,
    )  # fmt: skip
    raise retry.cause  # its own __cause__ is kept


def _wait_within(until: Callable[[], float], delay_s: float) -> bool:
    """Wait delay_s, asking until() again at least every POLL_S and whenever its deadline
    comes first; False when that deadline is reached before the wait ends (and until()
    did not raise)."""
    wake = time.monotonic() + delay_s
    while (now := time.monotonic()) < wake:
        bound = until()
        if bound <= now:
            return False
        time.sleep(compute_sleep(min(wake, bound) - now, POLL_S))
    return until() > time.monotonic()
