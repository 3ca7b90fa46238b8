"""The latency gate judges the live server's failures as it judges the candidate's: a
candidate no worse than live passes that check, one that fails more often than live fails."""

from __future__ import annotations

from collections import Counter

import pytest

from gates.common.settings import LatencySettings, Slo
from gates.latency.cell import CellSamples, summarise_cell
from gates.latency.gate import _decide_level
from gates.latency.metrics import RequestMetrics
from gates.latency.report import LevelFigures

MS = 1_000_000


def cell(label: str, n_requests: int, n_failed: int):  # type: ignore[no-untyped-def]
    ok = RequestMetrics(
        ttft_ns=100 * MS, e2el_ns=200 * MS, itl_ns=(50 * MS,) * 2, n_out=3, n_events=3, queue_ns=0
    )
    samples = CellSamples(
        [ok] * (n_requests - n_failed), n_requests, Counter({"HTTP 500": n_failed}), 1.0
    )
    return summarise_cell(samples, label=label, concurrency=1, slo=Slo())


@pytest.mark.parametrize(
    ("candidate_failed", "live_failed", "passes"),
    [(0, 0, True), (2, 2, True), (2, 3, True), (3, 1, False), (1, None, False)],
)
def test_candidate_failures_are_judged_against_live(
    candidate_failed: int, live_failed: int | None, passes: bool
) -> None:
    level = LevelFigures(
        concurrency=1,
        candidate=cell("candidate", 10, candidate_failed),
        baseline=None if live_failed is None else cell("baseline", 10, live_failed),
        comparisons=[],
        slo_checks=[],
        passed=None,
        findings=[],
    )
    decided = _decide_level(level, LatencySettings())
    assert (not decided.findings) is passes, decided.findings
    if not passes and live_failed is not None:
        assert f"(live: {live_failed} of 10)" in decided.findings[0]
