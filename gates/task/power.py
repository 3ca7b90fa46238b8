"""What a task suite can tell at its size (pure): the paired loss and its bounds, whether a
loss is shown beyond the margin, the smallest loss the suite could show, and how many cases
would bound an observed loss within the margin.

Scores are per case in [0, 1] (1 passed, 0 failed; fractions for graded suites); losses are
in points (percent of cases). Every bound is one-sided at the rule's confidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gates.common.stats import Interval
from gates.task.stats import mcnemar_worse, paired_bootstrap_difference, paired_loss

MAX_CASES = 100_000  # beyond this a suite is no longer an answer


@dataclass(frozen=True)
class Loss:
    """Baseline minus candidate, in points, with its one-sided bounds, and the paired test."""

    points: Interval
    significant: bool  # the paired test says the candidate is worse, not by chance
    p_value: float | None = None  # exact McNemar (pass/fail suites)


def paired(
    base: Sequence[float], cand: Sequence[float], *, graded: bool, confidence: float
) -> Loss:
    if graded:
        diff = paired_bootstrap_difference(cand, base, confidence=confidence)
        points = Interval(-diff.point * 100, -diff.high * 100, -diff.low * 100)
        return Loss(points, significant=diff.high < 0)
    a, b, c, d = _table(base, cand)
    p = mcnemar_worse(b, c)
    loss = paired_loss(b, c, a, d, confidence=confidence)
    points = Interval(loss.point * 100, loss.low * 100, loss.high * 100)
    return Loss(points, significant=p < 1 - confidence, p_value=p)


def shown(loss: Loss, margin: float) -> bool:
    """A loss beyond the margin that the paired test tells from chance."""
    return loss.points.point > margin and loss.significant


def detectable(
    base: Sequence[float], *, graded: bool, confidence: float, margin: float
) -> tuple[int, float] | None:
    """The fewest cases a candidate must lose (the baseline's best first, none gained) for
    the loss to be shown, and that loss in points; None when even losing every case the
    baseline scores on would not be: the suite measures nothing for this baseline."""
    order = sorted(range(len(base)), key=lambda i: -base[i])
    scored = sum(1 for s in base if s > 0)
    for m in range(1, scored + 1):
        cand = list(base)
        for i in order[:m]:
            cand[i] = 0.0
        loss = paired(base, cand, graded=graded, confidence=confidence)
        if shown(loss, margin):
            return m, loss.points.point
    return None


def cases_needed(
    base: Sequence[float],
    cand: Sequence[float],
    loss: Loss,
    *,
    graded: bool,
    confidence: float,
    margin: float,
) -> int | None:
    """About how many cases, lost and gained at the rates seen, would bound the loss within
    the margin; None when no size would (the loss seen is not within it)."""
    n = len(base)
    if loss.points.point >= margin:
        return None
    if graded:  # the bound's distance from the point shrinks as 1/sqrt(n)
        ratio = (loss.points.high - loss.points.point) / (margin - loss.points.point)
        return min(MAX_CASES, max(n + 1, math.ceil(n * ratio * ratio)))
    table = _table(base, cand)

    def fits(size: int) -> bool:
        a, b, c, d = (x * size / n for x in table)
        return paired_loss(b, c, a, d, confidence=confidence).high * 100 <= margin

    if not fits(MAX_CASES):
        return None
    low, high = n, MAX_CASES  # fits(high), not fits(low)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if fits(mid) else (mid, high)
    return high


def _table(base: Sequence[float], cand: Sequence[float]) -> tuple[int, int, int, int]:
    """Both passed, lost, gained, both failed."""
    pairs = [(b >= 1, c >= 1) for b, c in zip(base, cand, strict=True)]
    return (
        sum(b and c for b, c in pairs),
        sum(b and not c for b, c in pairs),
        sum(c and not b for b, c in pairs),
        sum(not (b or c) for b, c in pairs),
    )
