"""The poll schedule grows exponentially from its first delay, never exceeds the poll
interval (jitter only shortens), and never sleeps past the deadline."""

from __future__ import annotations

import pytest

from retrypolicy.backoff import compute_delay, compute_sleep


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
