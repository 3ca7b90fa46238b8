"""Poll scheduling: exponential backoff with jitter, capped, bounded by a deadline.

The schedule is pure arithmetic (``draw()`` supplies its random draw), so it is tested
as a table.
Jitter only shortens a delay, never lengthens it: a poller capped at its poll interval
therefore sees a change at most one interval after it happens.
"""

from __future__ import annotations

import os
import random

# Draws from a generator of our own: the module-level `random` belongs to the program
# that imports us (a seeded simulation, a property-based test), and a retry on a
# background thread must not move its state.
_draws = random.Random()
os.register_at_fork(after_in_child=_draws.seed)  # a forked child jitters on its own


def draw() -> float:
    """A jitter draw ``u`` in [0, 1)."""
    return _draws.random()


def compute_delay(
    attempt: int, *, first_s: float, cap_s: float, u: float, jitter: float = 0.5
) -> float:
    """Delay before poll ``attempt + 1``: ``first_s * 2**attempt`` capped at ``cap_s``,
    scaled by ``1 - jitter * u`` for a draw ``u`` in [0, 1)."""
    base = min(cap_s, first_s * 2.0 ** min(attempt, 60))
    return base * (1.0 - jitter * u)


def compute_sleep(delay_s: float, remaining_s: float) -> float:
    """Never sleep past the deadline, never a negative time."""
    return max(0.0, min(delay_s, remaining_s))
