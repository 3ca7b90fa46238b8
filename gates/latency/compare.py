"""Decide, per metric, whether the candidate regressed against the baseline (pure).

A metric regresses only when both hold (notes/gates.md, "deciding a regression"):
- one-sided Mann-Whitney U on per-request values says the candidate is worse (p < alpha), and
- the whole bootstrap interval of candidate/baseline lies past the practical margin; at more
  than one stream it resamples whole rounds, so one round that a burst of machine load
  slowed is not a regression unless the rest agree.
The margin keeps CPU noise on a shared machine from failing a candidate identical to its
baseline; the interval keeps a lucky point estimate from failing it either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from gates.common import stats
from gates.common.settings import LatencySettings
from gates.latency.cell import CellSamples, PerRequest, gaps_ms, scalar_ms
from gates.latency.metrics import NS_PER_MS, RequestMetrics

MetricName = Literal["tpot", "ttft", "itl_p99", "throughput"]
Outcome = Literal["regressed", "no regression", "no verdict"]


class Comparison(BaseModel):
    metric: MetricName
    worse_when: Literal["higher", "lower"]
    margin: float
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    p_value: float | None = None
    outcome: Outcome
    reason: str


@dataclass(frozen=True)
class _MetricSpec:
    name: MetricName
    worse_when: Literal["higher", "lower"]
    values: PerRequest  # one request's share of a unit
    statistic: stats.Statistic  # over the values of the units drawn
    per_request: Callable[[CellSamples], np.ndarray]  # what Mann-Whitney ranks


def _tokens_and_time(m: RequestMetrics) -> np.ndarray:
    # Closed loop: throughput ∝ Σ N_out / Σ E2EL, so a request carries both (tokens, ms).
    return np.array([m.n_out, m.e2el_ns / NS_PER_MS])


def _throughput(values: np.ndarray) -> Any:
    return values[..., 0::2].sum(-1) / values[..., 1::2].sum(-1)


_SPECS = (
    _MetricSpec("tpot", "higher", scalar_ms("tpot"), stats.median, lambda c: c.values_ms("tpot")),
    _MetricSpec("ttft", "higher", scalar_ms("ttft"), stats.median, lambda c: c.values_ms("ttft")),
    _MetricSpec(
        "itl_p99",
        "higher",
        gaps_ms,
        stats.p99,
        lambda c: np.array([stats.p99(gaps) for gaps in c.itl_ms()]),
    ),
    _MetricSpec(
        "throughput",
        "lower",
        _tokens_and_time,
        _throughput,
        lambda c: np.array([m.n_out / m.e2el_ns for m in c.metrics]),
    ),
)


def compare_cells(
    candidate: CellSamples, baseline: CellSamples, settings: LatencySettings
) -> list[Comparison]:
    """One comparison per gated metric."""
    return [_compare(spec, candidate, baseline, settings) for spec in _SPECS]


def _compare(
    spec: _MetricSpec, candidate: CellSamples, baseline: CellSamples, settings: LatencySettings
) -> Comparison:
    margin = getattr(settings.margins, spec.name)
    head = {"metric": spec.name, "worse_when": spec.worse_when, "margin": margin}
    worse, better = spec.per_request(candidate), spec.per_request(baseline)
    if min(worse.size, better.size) < settings.min_samples:
        reason = (
            f"{worse.size} candidate and {better.size} baseline samples; "
            f"at least {settings.min_samples} a side are needed"
        )
        return Comparison(**head, outcome="no verdict", reason=reason)
    interval = stats.bootstrap_ratio(
        candidate.resampling_units(spec.values),
        baseline.resampling_units(spec.values),
        spec.statistic,
        confidence=settings.confidence,
        n_resamples=settings.bootstrap_resamples,
        seed=settings.seed,
    )
    if spec.worse_when == "lower":
        worse, better = better, worse
    p_value = stats.mann_whitney_greater(worse, better)
    beyond = interval.low > margin if spec.worse_when == "higher" else interval.high < margin
    regressed = beyond and p_value < settings.alpha
    return Comparison(
        **head,
        ratio=interval.point,
        ratio_low=interval.low,
        ratio_high=interval.high,
        p_value=p_value,
        outcome="regressed" if regressed else "no regression",
        reason=_explain(spec, interval, margin, p_value, regressed, settings.confidence),
    )


def _explain(
    spec: _MetricSpec,
    interval: stats.Interval,
    margin: float,
    p_value: float,
    regressed: bool,
    confidence: float,
) -> str:
    ratio = (
        f"{spec.name} candidate/baseline {interval.point:.3f} "
        f"({confidence:.0%} interval {interval.low:.3f}–{interval.high:.3f}), p={p_value:.2g}"
    )
    side = "above" if spec.worse_when == "higher" else "below"
    if regressed:
        return f"{ratio}: wholly {side} the margin {margin}"
    return f"{ratio}: not wholly {side} the margin {margin} with significance"
