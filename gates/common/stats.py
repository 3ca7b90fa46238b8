"""Statistics for deciding a latency regression: Mann-Whitney U and bootstrap intervals
(the task gate's paired statistics build on its `Interval` and `percentile_interval`).

Pure numpy. Resampling draws whole units: a request (gaps inside a request are
correlated), or at more than one stream a whole round (requests streaming side by side share
the machine's stalls; `gates.latency.cell.CellSamples.from_runs`). Intervals are
percentile-bootstrap intervals with a fixed seed, so a recorded run always decides the same
way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

Statistic = Callable[[np.ndarray], Any]
"""Reduces the last axis: one value for a 1-D array, one per row for a 2-D one."""
_BLOCK_VALUES = 4_000_000  # resampled values held at once by the vectorised bootstrap


@dataclass(frozen=True)
class Interval:
    """A point estimate and its two-sided confidence interval."""

    point: float
    low: float
    high: float


def mann_whitney_greater(x: ArrayLike, y: ArrayLike) -> float:
    """One-sided p-value for "x tends to be larger than y".

    Normal approximation with tie correction and continuity correction; adequate from about
    five samples a side, which is the least the gates compare.
    """
    x_arr, y_arr = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n_x, n_y = x_arr.size, y_arr.size
    if n_x == 0 or n_y == 0:
        raise ValueError(f"Mann-Whitney U needs samples on both sides, got {n_x} and {n_y}")
    ranks, tie_sizes = _ranks(np.concatenate([x_arr, y_arr]))
    u_x = ranks[:n_x].sum() - n_x * (n_x + 1) / 2
    n = n_x + n_y
    tie_term = float((tie_sizes**3 - tie_sizes).sum()) / (n * (n - 1)) if n > 1 else 0.0
    variance = n_x * n_y / 12 * ((n + 1) - tie_term)
    if variance <= 0:
        return 0.5  # every value equal: no evidence either way
    z = (u_x - n_x * n_y / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def wilcoxon_greater(differences: ArrayLike) -> float:
    """One-sided p-value for "the differences tend to be above zero" (Wilcoxon's signed
    ranks; zeros dropped, normal approximation with tie and continuity corrections)."""
    d = np.asarray(differences, dtype=float)
    d = d[d != 0]
    if d.size == 0:
        return 0.5  # no pair differs: no evidence either way
    ranks, tie_sizes = _ranks(np.abs(d))
    w_plus = ranks[d > 0].sum()
    n = d.size
    variance = n * (n + 1) * (2 * n + 1) / 24 - float((tie_sizes**3 - tie_sizes).sum()) / 48
    if variance <= 0:
        return 0.5
    z = (w_plus - n * (n + 1) / 4 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) and the size of every group of tied values."""
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    _, first, counts = np.unique(sorted_values, return_index=True, return_counts=True)
    average = first + (counts + 1) / 2  # mean of ranks first+1 .. first+count
    ranks = np.empty(values.size)
    ranks[order] = np.repeat(average, counts)
    return ranks, counts.astype(float)


def bootstrap_ratio(
    candidate: Sequence[np.ndarray],
    baseline: Sequence[np.ndarray],
    statistic: Statistic,
    *,
    confidence: float,
    n_resamples: int,
    seed: int,
    paired: bool = False,
) -> Interval:
    """Interval of statistic(candidate) / statistic(baseline), resampling whole units.

    A unit is one request's array of values (one value for TTFT, all its gaps for ITL), or
    a round's: its requests' arrays joined. ``paired``: unit i of each side ran at the same
    place in the run (the same round and prompt), and each draw takes the same units of
    both, so what the two shared (the machine's drift, the prompt's length) cancels.
    """
    rng = np.random.default_rng(seed)
    if paired and len(candidate) != len(baseline):
        raise ValueError(f"paired units differ in number: {len(candidate)} and {len(baseline)}")
    cand_picks = _picks(len(candidate), n_resamples, rng)
    base_picks = cand_picks if paired else _picks(len(baseline), n_resamples, rng)
    cand_draws = _resampled_statistics(candidate, statistic, cand_picks)
    base_draws = _resampled_statistics(baseline, statistic, base_picks)
    point = float(statistic(np.concatenate(candidate)) / statistic(np.concatenate(baseline)))
    low, high = percentile_interval(cand_draws / base_draws, confidence)
    return Interval(point=point, low=low, high=high)


def bootstrap_interval(
    units: Sequence[np.ndarray],
    statistic: Statistic,
    *,
    confidence: float,
    n_resamples: int,
    seed: int,
) -> Interval:
    """Interval of statistic(units) itself, e.g. the candidate's p95 against an SLO."""
    picks = _picks(len(units), n_resamples, np.random.default_rng(seed))
    draws = _resampled_statistics(units, statistic, picks)
    low, high = percentile_interval(draws, confidence)
    return Interval(point=float(statistic(np.concatenate(units))), low=low, high=high)


def _picks(n: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, n, size=(n_resamples, n))


def _resampled_statistics(
    units: Sequence[np.ndarray], statistic: Statistic, picks: np.ndarray
) -> np.ndarray:
    n_resamples = len(picks)
    if len({unit.size for unit in units}) == 1:  # equal-sized units: whole blocks at once
        matrix = np.stack(units)
        rows = max(1, _BLOCK_VALUES // matrix.size)
        blocks = [
            statistic(matrix[picks[i : i + rows]].reshape(len(picks[i : i + rows]), -1))
            for i in range(0, n_resamples, rows)
        ]
        return np.concatenate([np.atleast_1d(block) for block in blocks])
    return np.array([statistic(np.concatenate([units[i] for i in row])) for row in picks])


def percentile_interval(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def median(values: np.ndarray) -> Any:
    return np.median(values, axis=-1)


def p95(values: np.ndarray) -> Any:
    return np.percentile(values, 95, axis=-1)


def p99(values: np.ndarray) -> Any:
    return np.percentile(values, 99, axis=-1)
