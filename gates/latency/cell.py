"""Figures for one side (candidate or baseline) at one concurrency level."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from gates.common.settings import Slo
from gates.latency.load import Run
from gates.latency.metrics import (
    NS_PER_MS,
    LatencySummary,
    RequestMetrics,
    compute_request_metrics,
    little_predicted_tok_s,
    summarise,
)

MAX_ERROR_KINDS = 5
CDF_POINTS = 201  # quantiles kept per metric: the distribution's shape at a bounded size


PerRequest = Callable[[RequestMetrics], np.ndarray | None]
"""One request's values, e.g. its TTFT or all its gaps; None or empty: it has none."""


def scalar_ms(field: str) -> PerRequest:
    """A request's `ttft`, `e2el` or `tpot` in ms as one value (no TPOT for one token)."""

    def value(m: RequestMetrics) -> np.ndarray | None:
        found = m.tpot_ms if field == "tpot" else getattr(m, f"{field}_ns") / NS_PER_MS
        return None if found is None else np.array([found])

    return value


def gaps_ms(m: RequestMetrics) -> np.ndarray:
    return np.asarray(m.itl_ns, dtype=float) / NS_PER_MS


@dataclass(frozen=True)
class CellSamples:
    """Per-request metrics of the successful requests of one cell, plus failure counts."""

    metrics: list[RequestMetrics]
    n_requests: int
    errors: Counter[str]
    duration_s: float
    n_out_guessed: int = 0  # successful requests whose N_out was not in `usage`
    n_ended_early: int = 0  # successful requests the model ended (EOS) before max_tokens
    # Per request, the round it ran in when rounds are the bootstrap's unit; empty: requests.
    units: tuple[int, ...] = ()
    # Per request, (round, place in its round): where it ran, the same on both sides of a
    # level (the same prompt, adjacent rounds), so the two can be paired. Empty: unknown.
    places: tuple[tuple[int, int], ...] = ()

    @classmethod
    def from_runs(cls, runs: list[Run], *, by_round: bool = False) -> CellSamples:
        """`by_round`: a round's requests form one unit. Requests that stream side by side
        share every stall of the machine (a burst of CPU load slows a whole round), so
        they are not independent: only whole rounds are."""
        records = [record for run in runs for record in run.records]
        metrics: list[RequestMetrics] = []
        places: list[tuple[int, int]] = []
        for number, run in enumerate(runs):
            for place, record in enumerate(run.records):
                if (m := compute_request_metrics(record)) is not None:
                    metrics.append(m)
                    places.append((number, place))
        errors = Counter(_error_kind(r.error) for r in records if r.error is not None)
        errors.update("no token events" for r in records if r.error is None and not r.ok)
        guessed = sum(r.ok and r.n_out_source == "events" for r in records)
        early = sum(r.ok and r.ended_early for r in records)
        duration_s = sum(run.duration_s for run in runs)
        units = tuple(number for number, _ in places) if by_round else ()
        return cls(metrics, len(records), errors, duration_s, guessed, early, units, tuple(places))

    def _found(self, values: PerRequest) -> Iterator[tuple[int, np.ndarray]]:
        """(position, `values`) of each request that has any."""
        for position, m in enumerate(self.metrics):
            if (found := values(m)) is not None and found.size:
                yield position, found

    def per_request(self, values: PerRequest) -> list[np.ndarray]:
        """`values` of each request that has any."""
        return [found for _, found in self._found(values)]

    def keyed_units(self, values: PerRequest) -> dict[object, np.ndarray]:
        """`values` joined into the units the bootstrap draws whole, one per request or one
        per round (`from_runs`), by where they ran: a round's number, or a request's
        (round, place) when requests are the units and their places are known."""
        key_of: Callable[[int], object]
        if self.units:
            key_of = self.units.__getitem__
        elif self.places:
            key_of = self.places.__getitem__
        else:
            key_of = int
        grouped: dict[object, list[np.ndarray]] = {}
        for position, found in self._found(values):
            grouped.setdefault(key_of(position), []).append(found)
        return {key: np.concatenate(parts) for key, parts in grouped.items()}

    def by_place(self, values: PerRequest) -> dict[tuple[int, int], np.ndarray]:
        """`values` of each request that has any, by its (round, place); empty when the
        places are unknown."""
        if not self.places:
            return {}
        return {self.places[position]: found for position, found in self._found(values)}

    def joined(self, values: PerRequest) -> np.ndarray:
        """`values` of every request that has any, in one array."""
        return np.concatenate(self.per_request(values) or [np.empty(0)])

    def values_ms(self, field: str) -> np.ndarray:
        """One value per request: `ttft`, `e2el` or `tpot` in ms."""
        return self.joined(scalar_ms(field))

    def output_tokens(self) -> int:
        return sum(m.n_out for m in self.metrics)


def _error_kind(error: str) -> str:
    return error.split(":", 1)[0][:120]


class LittleCheck(BaseModel):
    """Measured throughput against C·N̄ / (TTFT̄ + (N̄−1)·TPOT̄); far from 1 means idle gaps
    in the load or per-chunk (not per-token) timing."""

    predicted_tok_s: float
    measured_tok_s: float

    @property
    def ratio(self) -> float:
        return self.measured_tok_s / self.predicted_tok_s


class CellFigures(BaseModel):
    label: str
    concurrency: int
    n_requests: int
    n_ok: int
    n_failed: int
    errors: dict[str, int]
    ttft_ms: LatencySummary | None
    tpot_ms: LatencySummary | None
    itl_ms: LatencySummary | None
    e2el_ms: LatencySummary | None
    queue_ms: LatencySummary | None
    tokens_per_event: LatencySummary | None
    output_tokens: int
    n_out_guessed: int = Field(0, description="N_out counted from events: no usage sent")
    n_ended_early: int = Field(0, description="answers the model ended (EOS) before max_tokens")
    duration_s: float
    throughput_tok_s: float | None
    goodput_req_s: float | None
    little: LittleCheck | None
    cdf_ms: dict[str, list[float]] = Field(
        default_factory=dict,
        description="ttft, tpot, itl: the sorted samples, or CDF_POINTS evenly spaced quantiles",
    )


def distribution(values: np.ndarray) -> list[float]:
    """The samples' distribution at a size that suits a report: all of them sorted when few,
    else evenly spaced quantiles (the empirical CDF at CDF_POINTS probabilities)."""
    if values.size <= CDF_POINTS:
        ordered = np.sort(values)
    else:
        ordered = np.quantile(values, np.linspace(0.0, 1.0, CDF_POINTS))
    return [round(float(v), 3) for v in ordered]


def summarise_cell(samples: CellSamples, *, label: str, concurrency: int, slo: Slo) -> CellFigures:
    metrics = samples.metrics
    tpot_v, ttft_v = samples.values_ms("tpot"), samples.values_ms("ttft")
    tpot, ttft = summarise(tpot_v), summarise(ttft_v)
    itl = samples.joined(gaps_ms)
    # no successful request: no throughput figure (0 tok/s would read as a measurement)
    throughput = (
        samples.output_tokens() / samples.duration_s if metrics and samples.duration_s > 0 else None
    )
    return CellFigures(
        label=label,
        concurrency=concurrency,
        n_requests=samples.n_requests,
        n_ok=len(metrics),
        n_failed=samples.n_requests - len(metrics),
        errors=dict(samples.errors.most_common(MAX_ERROR_KINDS)),
        ttft_ms=ttft,
        tpot_ms=tpot,
        itl_ms=summarise(itl),
        e2el_ms=summarise(samples.values_ms("e2el")),
        queue_ms=summarise([m.queue_ns / NS_PER_MS for m in metrics]),
        tokens_per_event=summarise([m.tokens_per_event for m in metrics]),
        output_tokens=samples.output_tokens(),
        n_out_guessed=samples.n_out_guessed,
        n_ended_early=samples.n_ended_early,
        duration_s=samples.duration_s,
        throughput_tok_s=throughput,
        goodput_req_s=_goodput(samples, slo),
        little=_little(samples, concurrency, throughput, ttft, tpot),
        cdf_ms={
            "ttft": distribution(ttft_v),
            "tpot": distribution(tpot_v),
            "itl": distribution(itl),
        },
    )


def _little(
    samples: CellSamples,
    concurrency: int,
    throughput: float | None,
    ttft: LatencySummary | None,
    tpot: LatencySummary | None,
) -> LittleCheck | None:
    if not (throughput and ttft and tpot):
        return None
    predicted = little_predicted_tok_s(
        concurrency=concurrency,
        mean_n_out=float(np.mean([m.n_out for m in samples.metrics])),
        mean_ttft_ms=ttft.mean,
        mean_tpot_ms=tpot.mean,
    )
    return LittleCheck(predicted_tok_s=predicted, measured_tok_s=throughput)


def _goodput(samples: CellSamples, slo: Slo) -> float | None:
    """Requests meeting every SLO per second; None when no SLO is set."""
    limits = slo.limits()
    if not limits or samples.duration_s <= 0:
        return None
    good = sum(
        all(_metric_ms(m, name) <= limit for name, limit in limits.items()) for m in samples.metrics
    )
    return good / samples.duration_s


def _metric_ms(metrics: RequestMetrics, name: str) -> float:
    if name == "tpot":  # a one-token answer has no TPOT, so it cannot miss a TPOT SLO
        return metrics.tpot_ms or 0.0
    ns: int = getattr(metrics, f"{name}_ns")
    return ns / NS_PER_MS
