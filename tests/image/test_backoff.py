"""The poll schedule grows exponentially from its first delay, never exceeds the poll
interval (jitter only shortens), and never sleeps past the deadline; its jitter leaves the
program's own random state alone."""

from __future__ import annotations

import random
import threading

import pytest

from retrypolicy.backoff import compute_delay, compute_sleep
from retrypolicy.retry import Retry, RetryPolicy, with_retries

QUICK = RetryPolicy(budget_s=5.0, first_s=0.01, cap_s=0.02)


@pytest.mark.parametrize(
    ("attempt", "u", "expected"),
    [
        (0, 0.0, 1.25),  # first delay, no jitter drawn
        (1, 0.0, 2.5),
        (2, 0.0, 5.0),
        (3, 0.0, 10.0),  # reached the cap
        (9, 0.0, 10.0),
        (3, 0.999999, 5.000005),  # most jitter: half the capped delay
        (0, 0.5, 0.9375),
        (10_000, 0.0, 10.0),  # huge attempt counts do not overflow
    ],
)
def test_compute_delay(attempt: int, u: float, expected: float) -> None:
    assert compute_delay(attempt, first_s=1.25, cap_s=10.0, u=u) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("delay", "remaining", "expected"),
    [(5.0, 10.0, 5.0), (5.0, 2.0, 2.0), (5.0, -1.0, 0.0), (0.0, 3.0, 0.0)],
)
def test_compute_sleep(delay: float, remaining: float, expected: float) -> None:
    assert compute_sleep(delay, remaining) == expected


def test_retrying_leaves_the_programs_own_random_state_alone() -> None:
    """Jitter draws from its own generator: a retry, on any thread, does not move the
    module-level `random` a seeded program or a property-based test relies on."""
    before = random.getstate()
    tries: list[int] = []

    def attempt() -> int:
        tries.append(1)
        if len(tries) < 3:
            raise Retry(ConnectionError("not yet"))
        return len(tries)

    worker = threading.Thread(
        target=lambda: tries.append(with_retries(attempt, what="a test", rules=QUICK))
    )
    worker.start()
    worker.join()
    assert tries[-1] == 3
    assert random.getstate() == before
