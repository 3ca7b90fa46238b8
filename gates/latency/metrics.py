"""Per-request latency metrics and their summaries (definitions as in notes/gates.md).

All per-request values derive from the record's stamps, in integer nanoseconds, so that
E2EL − TTFT equals the sum of the ITL gaps exactly:
- TTFT  = first token event − t_send
- E2EL  = last token event − t_send
- ITL   = each gap between consecutive token events (inter-chunk latency, pooled over requests)
- TPOT  = (E2EL − TTFT) / (N_out − 1), N_out from `usage.completion_tokens`; one value per
  request, requests weighted equally
- tokens per event = N_out / token events (> 1 when chunks carry several tokens)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from gates.http.records import RequestRecord

NS_PER_MS = 1e6


@dataclass(frozen=True)
class RequestMetrics:
    """Latency figures of one successful request."""

    ttft_ns: int
    e2el_ns: int
    itl_ns: tuple[int, ...]
    n_out: int
    n_events: int
    queue_ns: int

    @property
    def tpot_ms(self) -> float | None:
        if self.n_out < 2:
            return None  # a single token has no time per output token
        return (self.e2el_ns - self.ttft_ns) / (self.n_out - 1) / NS_PER_MS

    @property
    def tokens_per_event(self) -> float:
        return self.n_out / self.n_events


def compute_request_metrics(record: RequestRecord) -> RequestMetrics | None:
    """Metrics of a successful request; None for a failed one (it is counted, not measured)."""
    times = record.token_times_ns
    if not record.ok or record.t_send_ns is None or record.n_out is None:
        return None
    return RequestMetrics(
        ttft_ns=times[0] - record.t_send_ns,
        e2el_ns=times[-1] - record.t_send_ns,
        itl_ns=tuple(int(b - a) for a, b in itertools.pairwise(times)),
        n_out=record.n_out,
        n_events=len(times),
        queue_ns=record.queue_ns or 0,
    )


class LatencySummary(BaseModel):
    """Distribution of one metric; built only from at least one sample."""

    n: int
    mean: float
    std: float
    p50: float
    p90: float
    p95: float
    p99: float


def summarise(values: Sequence[float] | np.ndarray) -> LatencySummary | None:
    """Summary of `values`, or None when there are none (no sample is not 0 ms)."""
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        return None
    p50, p90, p95, p99 = np.percentile(array, [50, 90, 95, 99])
    return LatencySummary(
        n=int(array.size),
        mean=float(array.mean()),
        std=float(array.std(ddof=1)) if array.size > 1 else 0.0,
        p50=float(p50),
        p90=float(p90),
        p95=float(p95),
        p99=float(p99),
    )


def little_predicted_tok_s(
    *, concurrency: int, mean_n_out: float, mean_ttft_ms: float, mean_tpot_ms: float
) -> float:
    """Closed-loop throughput Little's law predicts: C·N̄ / (TTFT̄ + (N̄−1)·TPOT̄)."""
    seconds_per_request = (mean_ttft_ms + (mean_n_out - 1) * mean_tpot_ms) / 1e3
    return concurrency * mean_n_out / seconds_per_request
