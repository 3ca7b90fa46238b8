"""Mann-Whitney U (normal approximation, ties) and bootstrap ratio intervals behave as the
latency decision needs: no evidence between equal samples, strong evidence for a clear shift,
reproducible intervals that cover the true ratio."""

from __future__ import annotations

import numpy as np
import pytest

from gates.common import stats


@pytest.mark.parametrize(
    ("x", "y", "low", "high"),
    [
        ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], 0.4, 0.6),  # identical: p ≈ 0.5
        ([6, 7, 8, 9, 10], [1, 2, 3, 4, 5], 0.0, 0.01),  # x wholly above y
        ([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], 0.99, 1.0),  # x wholly below y
        ([3, 3, 3, 3, 3], [3, 3, 3, 3, 3], 0.5, 0.5),  # all tied: no evidence
    ],
)
def test_mann_whitney_one_sided(x: list[float], y: list[float], low: float, high: float) -> None:
    assert low <= stats.mann_whitney_greater(x, y) <= high


def test_mann_whitney_matches_the_textbook_value() -> None:
    # U = 19 of 25 pairs with x above y; normal approximation with continuity correction:
    # z = (19 - 12.5 - 0.5) / sqrt(5·5·11/12) = 1.2533, p = 0.1050 (scipy's "asymptotic").
    x, y = [4, 6, 7, 8, 9], [1, 2, 3, 5, 10]
    assert stats.mann_whitney_greater(x, y) == pytest.approx(0.1050, abs=5e-4)


def test_ties_shrink_the_variance() -> None:
    tied = stats.mann_whitney_greater([2, 2, 2, 3, 3], [1, 1, 2, 2, 2])
    untied = stats.mann_whitney_greater([2.1, 2.2, 2.3, 3.1, 3.2], [1.1, 1.2, 1.9, 1.95, 2.0])
    assert tied < 0.05 and untied < 0.05


def test_mann_whitney_refuses_empty_samples() -> None:
    with pytest.raises(ValueError, match="needs samples on both sides"):
        stats.mann_whitney_greater([], [1.0])


@pytest.mark.parametrize("true_ratio", [0.8, 1.0, 1.2])
def test_bootstrap_ratio_covers_the_true_ratio(true_ratio: float) -> None:
    rng = np.random.default_rng(1)
    base = [np.array([v]) for v in rng.normal(100, 3, 40)]
    cand = [np.array([v]) for v in rng.normal(100 * true_ratio, 3 * true_ratio, 40)]
    interval = stats.bootstrap_ratio(
        cand, base, stats.median, confidence=0.98, n_resamples=500, seed=0
    )
    assert interval.low <= true_ratio <= interval.high
    assert interval.high - interval.low < 0.06
    again = stats.bootstrap_ratio(
        cand, base, stats.median, confidence=0.98, n_resamples=500, seed=0
    )
    assert again == interval


def test_bootstrap_resamples_ragged_units_whole() -> None:
    units = [np.array([1.0, 1.0, 1.0]), np.array([2.0]), np.array([3.0, 3.0])]
    interval = stats.bootstrap_interval(units, stats.p99, confidence=0.98, n_resamples=200, seed=0)
    assert 1.0 <= interval.low <= interval.point <= interval.high <= 3.0


def test_wilcoxon_signed_ranks_one_sided() -> None:
    ten = np.arange(1.0, 11.0)
    # every pair above: W+ = 55 of 55; normal approximation z = 2.75
    assert stats.wilcoxon_greater(ten) == pytest.approx(0.00296, abs=5e-5)
    assert stats.wilcoxon_greater(-ten) > 0.99
    assert 0.4 < stats.wilcoxon_greater(np.concatenate([ten, -ten])) < 0.6
    assert stats.wilcoxon_greater(np.zeros(8)) == 0.5  # no pair differs: no evidence


def test_a_paired_interval_draws_the_same_units_of_both_sides() -> None:
    """Units that share a large common factor (the prompt, the machine's drift) give a
    tight paired ratio, a wide unpaired one."""
    rng = np.random.default_rng(5)
    shared = rng.uniform(50, 500, 30)
    candidate = [np.array([v * rng.normal(1, 0.01)]) for v in shared]
    baseline = [np.array([v * rng.normal(1, 0.01)]) for v in shared]

    def ratio(cand: list[np.ndarray], base: list[np.ndarray], paired: bool) -> stats.Interval:
        return stats.bootstrap_ratio(
            cand, base, stats.median, confidence=0.98, n_resamples=1000, seed=0, paired=paired
        )

    paired, apart = ratio(candidate, baseline, True), ratio(candidate, baseline, False)
    assert paired.high - paired.low < 0.05 < apart.high - apart.low
    with pytest.raises(ValueError, match="differ in number"):
        ratio(candidate, baseline[1:], True)
