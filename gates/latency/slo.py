"""Absolute SLOs: the upper bound of the candidate's p95 must be under each limit (pure)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel

from gates.common import stats
from gates.common.settings import LatencySettings, Slo
from gates.latency.cell import CellSamples

SloMetric = Literal["ttft", "tpot", "e2el"]


class SloCheck(BaseModel):
    metric: SloMetric
    limit_ms: float
    p95_ms: float | None = None
    p95_upper_ms: float | None = None
    met: bool | None = None


def check_slos(candidate: CellSamples, slo: Slo, settings: LatencySettings) -> list[SloCheck]:
    """One check per SLO that is set; too few samples give no verdict (`met` None)."""
    return [
        _check(metric, limit, candidate.values_ms(metric), settings)
        for metric, limit in slo.limits().items()
    ]


def _check(
    metric: SloMetric, limit: float, values: np.ndarray, settings: LatencySettings
) -> SloCheck:
    if values.size < settings.min_samples:
        return SloCheck(metric=metric, limit_ms=limit)
    interval = stats.bootstrap_interval(
        [np.array([v]) for v in values],
        stats.p95,
        confidence=settings.confidence,
        n_resamples=settings.bootstrap_resamples,
        seed=settings.seed,
    )
    return SloCheck(
        metric=metric,
        limit_ms=limit,
        p95_ms=interval.point,
        p95_upper_ms=interval.high,
        met=interval.high <= limit,
    )
