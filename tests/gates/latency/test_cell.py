"""Cell figures: goodput counts requests meeting every SLO, a cell without a successful
request has no throughput or latency figures (never 0), and ITL pools every request's gaps."""

from __future__ import annotations

from collections import Counter

import pytest

from gates.common.settings import Slo
from gates.latency.cell import CellSamples, summarise_cell
from gates.latency.metrics import RequestMetrics

MS = 1_000_000


def request(ttft_ms: int, gap_ms: int, n_out: int = 5) -> RequestMetrics:
    gaps = (gap_ms * MS,) * (n_out - 1)
    return RequestMetrics(
        ttft_ns=ttft_ms * MS,
        e2el_ns=ttft_ms * MS + sum(gaps),
        itl_ns=gaps,
        n_out=n_out,
        n_events=n_out,
        queue_ns=0,
    )


SAMPLES = CellSamples(
    [request(100, 10), request(300, 10), request(100, 50)],
    4,
    Counter({"HTTP 500": 1}),
    duration_s=2.0,
)


@pytest.mark.parametrize(
    ("slo", "goodput"),
    [
        (Slo(), None),
        (Slo(ttft_ms=200), 1.0),
        (Slo(ttft_ms=200, tpot_ms=20), 0.5),
        (Slo(e2el_ms=1000), 1.5),
    ],
)
def test_goodput_counts_requests_meeting_every_slo(slo: Slo, goodput: float | None) -> None:
    cell = summarise_cell(SAMPLES, label="candidate", concurrency=2, slo=slo)
    assert cell.goodput_req_s == goodput


def test_figures_of_a_cell() -> None:
    cell = summarise_cell(SAMPLES, label="candidate", concurrency=2, slo=Slo())
    assert (cell.n_requests, cell.n_ok, cell.n_failed) == (4, 3, 1)
    assert cell.itl_ms.n == 12 and cell.itl_ms.p50 == 10.0
    assert cell.throughput_tok_s == 15 / 2.0
    assert cell.little is not None and cell.errors == {"HTTP 500": 1}


def test_a_cell_without_successes_has_no_figures() -> None:
    empty = CellSamples([], 3, Counter({"stalled after 3 token events": 3}), duration_s=1.0)
    cell = summarise_cell(empty, label="candidate", concurrency=1, slo=Slo(ttft_ms=1))
    assert cell.ttft_ms is cell.tpot_ms is cell.itl_ms is cell.throughput_tok_s is None
    assert cell.little is None and cell.n_failed == 3
