"""Paired statistics for the task gate: the same cases scored on both sides.

Pass/fail cases: exact McNemar (a one-sided binomial test on the discordant cases), Wilson
intervals for each side's pass rate, and Newcombe's hybrid score interval (his method 10,
Stat. Med. 1998) for the paired loss. Graded scores (k samples, graded checkers): a paired
percentile bootstrap over cases with a fixed seed, so a recorded run always decides the
same way. Every bound a decision reads is one-sided at `confidence`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from gates.common.stats import Interval, percentile_interval

SEED = 0


def mcnemar_worse(lost: int, gained: int) -> float:
    """One-sided exact p-value that the candidate is worse: P(X >= lost), X ~ Bin(n, 1/2),
    n the discordant cases (lost: baseline passed and candidate failed; gained: the reverse)."""
    n = lost + gained
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(lost, n + 1)) / (1 << n)


def wilson(passed: int, n: int, *, confidence: float) -> Interval:
    """The pass rate and its two-sided Wilson score interval."""
    return _wilson(passed, n, _z(confidence))


def _wilson(passed: float, n: float, z: float) -> Interval:
    if n == 0:
        raise ValueError("a pass rate needs at least one case")
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Interval(point=p, low=max(0.0, centre - half), high=min(1.0, centre + half))


def paired_loss(
    lost: float, gained: float, both_passed: float, both_failed: float, *, confidence: float
) -> Interval:
    """The baseline's pass rate minus the candidate's, with bounds each one-sided at
    `confidence`: Newcombe's hybrid score interval for paired proportions (method 10), which
    narrows as the two sides agree case by case. Counts may be fractional (a suite scaled to
    another size at the same rates)."""
    a, b, c, d = both_passed, lost, gained, both_failed
    n = a + b + c + d
    z = NormalDist().inv_cdf(confidence)
    base, cand = _wilson(a + b, n, z), _wilson(a + c, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    if cross > 0:  # Newcombe's continuity correction of the correlation
        cross = max(cross - n / 2, 0.0)
    phi = cross / math.sqrt(margins) if margins > 0 else 0.0
    loss = base.point - cand.point

    def spread(x: float, y: float) -> float:
        return math.sqrt(max(x * x - 2 * phi * x * y + y * y, 0.0))

    low = loss - spread(base.point - base.low, cand.high - cand.point)
    high = loss + spread(base.high - base.point, cand.point - cand.low)
    return Interval(point=loss, low=max(low, -1.0), high=min(high, 1.0))


def bootstrap_mean(
    scores: Sequence[float], *, confidence: float, n_resamples: int = 2000
) -> Interval:
    """Mean score over cases and its percentile-bootstrap interval."""
    values = np.asarray(scores, dtype=float)
    draws = _resample(values, n_resamples).mean(axis=1)
    return _interval(float(values.mean()), draws, confidence)


def paired_bootstrap_difference(
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    confidence: float,
    n_resamples: int = 2000,
) -> Interval:
    """Mean of (candidate - baseline) per case, resampling whole cases; each bound is
    one-sided at `confidence` (the (1 - confidence) and `confidence` percentiles)."""
    diff = np.asarray(candidate, dtype=float) - np.asarray(baseline, dtype=float)
    draws = _resample(diff, n_resamples).mean(axis=1)
    return _interval(float(diff.mean()), draws, 2 * confidence - 1)


def _resample(values: np.ndarray, n_resamples: int) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    return values[rng.integers(0, values.size, size=(n_resamples, values.size))]


def _interval(point: float, draws: np.ndarray, confidence: float) -> Interval:
    low, high = percentile_interval(draws, confidence)
    return Interval(point=point, low=low, high=high)


def _z(confidence: float) -> float:
    """The two-sided normal quantile for `confidence`."""
    return NormalDist().inv_cdf((1 + confidence) / 2)
