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
    paired: bool = False  # the interval drew both sides' units in pairs
    outcome: Outcome
    reason: str


@dataclass(frozen=True)
class _MetricSpec:
    name: MetricName
    worse_when: Literal["higher", "lower"]
    values: PerRequest  # one request's share of a unit
    statistic: stats.Statistic  # over the values of the units drawn
    ranked: PerRequest  # the one value per request the rank test compares


def _tokens_and_time(m: RequestMetrics) -> np.ndarray:
    # Closed loop: throughput ∝ Σ N_out / Σ E2EL, so a request carries both (tokens, ms).
    return np.array([m.n_out, m.e2el_ns / NS_PER_MS])


def _throughput(values: np.ndarray) -> Any:
    return values[..., 0::2].sum(-1) / values[..., 1::2].sum(-1)


def _gaps_p99(m: RequestMetrics) -> np.ndarray | None:
    gaps = gaps_ms(m)
    return np.array([stats.p99(gaps)]) if gaps.size else None


_SPECS = (
    _MetricSpec("tpot", "higher", scalar_ms("tpot"), stats.median, scalar_ms("tpot")),
    _MetricSpec("ttft", "higher", scalar_ms("ttft"), stats.median, scalar_ms("ttft")),
    _MetricSpec("itl_p99", "higher", gaps_ms, stats.p99, _gaps_p99),
    _MetricSpec(
        "throughput",
        "lower",
        _tokens_and_time,
        _throughput,
        lambda m: np.array([m.n_out / m.e2el_ns]),
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
    worse, better = candidate.joined(spec.ranked), baseline.joined(spec.ranked)
    if min(worse.size, better.size) < settings.min_samples:
        reason = (
            f"{worse.size} candidate and {better.size} baseline samples; "
            f"at least {settings.min_samples} a side are needed"
        )
        return Comparison(**head, outcome="no verdict", reason=reason)
    cand_units, base_units, paired = _units(spec, candidate, baseline, settings)
    interval = stats.bootstrap_ratio(
        cand_units,
        base_units,
        spec.statistic,
        confidence=settings.confidence,
        n_resamples=settings.bootstrap_resamples,
        seed=settings.seed,
        paired=paired,
    )
    p_value = _p_value(spec, candidate, baseline, paired=paired)
    beyond = interval.low > margin if spec.worse_when == "higher" else interval.high < margin
    regressed = beyond and p_value < settings.alpha
    return Comparison(
        **head,
        ratio=interval.point,
        ratio_low=interval.low,
        ratio_high=interval.high,
        p_value=p_value,
        paired=paired,
        outcome="regressed" if regressed else "no regression",
        reason=_explain(spec, interval, margin, p_value, regressed, settings.confidence, paired),
    )


def _p_value(
    spec: _MetricSpec, candidate: CellSamples, baseline: CellSamples, *, paired: bool
) -> float:
    """One-sided: the candidate tends to be worse. Paired like the interval (Wilcoxon's
    signed ranks of each pair's log ratio, where what the pair shared cancels), else
    Mann-Whitney over every request."""
    worse, better = candidate, baseline
    if spec.worse_when == "lower":
        worse, better = better, worse
    if not paired:
        return stats.mann_whitney_greater(worse.joined(spec.ranked), better.joined(spec.ranked))
    mine, theirs = worse.by_place(spec.ranked), better.by_place(spec.ranked)
    common = [place for place in mine if place in theirs]
    ratios = np.array([mine[place][0] / theirs[place][0] for place in common])
    return stats.wilcoxon_greater(np.log(ratios[ratios > 0]))


def _units(
    spec: _MetricSpec, candidate: CellSamples, baseline: CellSamples, settings: LatencySettings
) -> tuple[list[np.ndarray], list[np.ndarray], bool]:
    """Both sides' bootstrap units, in pairs where every unit of each side has its
    counterpart on the other (a failed request leaves its pair out) and enough pairs
    remain; else each side's own, unpaired."""
    cand, base = candidate.keyed_units(spec.values), baseline.keyed_units(spec.values)
    known = bool(candidate.places and baseline.places)
    common = [key for key in cand if key in base]
    if settings.paired and known and len(common) >= settings.min_samples:
        return [cand[k] for k in common], [base[k] for k in common], True
    return list(cand.values()), list(base.values()), False


def _explain(
    spec: _MetricSpec,
    interval: stats.Interval,
    margin: float,
    p_value: float,
    regressed: bool,
    confidence: float,
    paired: bool,
) -> str:
    kind = "paired interval" if paired else "interval"
    ratio = (
        f"{spec.name} candidate/baseline {interval.point:.3f} "
        f"({confidence:.0%} {kind} {interval.low:.3f}–{interval.high:.3f}), p={p_value:.2g}"
    )
    side = "above" if spec.worse_when == "higher" else "below"
    if regressed:
        return f"{ratio}: wholly {side} the margin {margin}"
    return f"{ratio}: not wholly {side} the margin {margin} with significance"
