"""Paired statistics for the task gate: the same cases scored on both sides.

Pass/fail cases: exact McNemar (a one-sided binomial test on the discordant cases) and
Wilson intervals for each side's pass rate. Graded scores (k samples, graded checkers):
a paired percentile bootstrap over cases with a fixed seed, so a recorded run always
decides the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from gates.stats import Interval, percentile_interval

SEED = 0


def mcnemar_worse(lost: int, gained: int) -> float:
    """One-sided exact p-value that the candidate is worse: P(X >= lost), X ~ Bin(n, 1/2),
    n the discordant cases (lost: baseline passed and candidate failed; gained: the reverse)."""
    n = lost + gained
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(lost, n + 1)) / (1 << n)


def wilson(passed: int, n: int, *, confidence: float) -> Interval:
    """The pass rate and its Wilson score interval."""
    if n == 0:
        raise ValueError("a pass rate needs at least one case")
    z = _z(confidence)
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Interval(point=p, low=max(0.0, centre - half), high=min(1.0, centre + half))


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
    """Mean of (candidate - baseline) per case, resampling whole cases."""
    diff = np.asarray(candidate, dtype=float) - np.asarray(baseline, dtype=float)
    draws = _resample(diff, n_resamples).mean(axis=1)
    return _interval(float(diff.mean()), draws, confidence)


def _resample(values: np.ndarray, n_resamples: int) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    return values[rng.integers(0, values.size, size=(n_resamples, values.size))]


def _interval(point: float, draws: np.ndarray, confidence: float) -> Interval:
    low, high = percentile_interval(draws, confidence)
    return Interval(point=point, low=low, high=high)


def _z(confidence: float) -> float:
    """The two-sided normal quantile for `confidence`."""
    return NormalDist().inv_cdf((1 + confidence) / 2)
