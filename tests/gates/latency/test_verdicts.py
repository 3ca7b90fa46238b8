"""Three verdicts for the latency gate, decided on rounds built from token stamps (pure):
a level passes only when every metric's interval lies within its margin, fails when a
regression is shown, and otherwise ends with no verdict that names the metric, its
interval, the margin and what would decide it. The power the run had is in its figures. A
level whose baseline itself fails (streams cut after one token, streams refused for want of
slots) is no comparison over the survivors: it gets no verdict with its cause."""

from __future__ import annotations

import numpy as np
import pytest

from gates.common.settings import LatencySettings
from gates.http.records import RequestRecord
from gates.latency.gate import (
    BASELINE,
    CANDIDATE,
    _decide_level,
    _result,
    evaluate_level,
    is_certain,
)
from gates.latency.load import Run
from gates.latency.report import LatencyFigures, LevelFigures, render_level
from gates.latency.slo import SloCheck

MS = 1_000_000
TOKENS = 32
SETTINGS = LatencySettings(bootstrap_resamples=1000)
LAST_LOOK = SETTINGS.at_each_look()


def one_round(
    rng: np.random.Generator,
    streams: int,
    *,
    scale: float = 1.0,
    noise: float = 0.03,
    spread: float = 0.0,
    cut: int = 0,
    cut_as: str = "error",
    refused: int = 0,
) -> Run:
    """`streams` requests: TTFT 150 ms and 40 ms gaps (`noise` relative) times `scale`, each
    request as a whole slower or faster by `spread` (relative).
    The first `cut` end after one token (`cut_as` "error": the client saw the stream cut
    short; "stop": the server called it the model's end); the next `refused` get HTTP 503."""
    records = []
    for index in range(streams):
        if index < cut:
            stamp = int(150 * MS * rng.normal(1, noise))
            error = (
                f"stream delivered 1 tokens, expected {TOKENS}, finish_reason 'length': "
                "the server cut the answer short"
            )
            records.append(
                RequestRecord(
                    index=index,
                    t_send_ns=0,
                    token_times_ns=[stamp],
                    n_out=1,
                    status=200,
                    expected_tokens=TOKENS,
                    finish_reason="stop" if cut_as == "stop" else "length",
                    error=None if cut_as == "stop" else error,
                )
            )
            continue
        if index < cut + refused:
            records.append(
                RequestRecord(
                    index=index,
                    t_send_ns=0,
                    status=503,
                    error="HTTP 503 from /v1/completions: server busy",
                )
            )
            continue
        slow = scale * rng.normal(1, spread) if spread else scale
        t = int(150 * MS * slow * rng.normal(1, noise))
        stamps = [t]
        for _ in range(1, TOKENS):
            t += int(40 * MS * slow * rng.normal(1, noise))
            stamps.append(t)
        records.append(
            RequestRecord(index=index, t_send_ns=0, token_times_ns=stamps, n_out=TOKENS, status=200)
        )
    return Run(records, 0, max([r.token_times_ns[-1] for r in records if r.token_times_ns] or [1]))


def level_after(
    streams: int,
    rounds: int,
    *,
    seed: int,
    settings: LatencySettings = LAST_LOOK,
    candidate: dict[str, float | int | str] | None = None,
    baseline: dict[str, float | int | str] | None = None,
    per_round: int | None = None,
) -> LevelFigures:
    rng = np.random.default_rng(seed)
    size = per_round or streams
    runs = {
        CANDIDATE: [one_round(rng, size, **(candidate or {})) for _ in range(rounds)],  # type: ignore[arg-type]
        BASELINE: [one_round(rng, size, **(baseline or {})) for _ in range(rounds)],  # type: ignore[arg-type]
    }
    return evaluate_level(runs, streams, settings, rounds=rounds)


FIVE_PERCENT_SLOWER: dict[str, dict[str, float | int | str]] = {
    "candidate": {"scale": 1.05, "spread": 0.1},
    "baseline": {"spread": 0.1},
}


def comparison(level: LevelFigures, metric: str):  # type: ignore[no-untyped-def]
    return next(c for c in level.comparisons if c.metric == metric)


def test_an_identical_candidate_with_a_narrow_interval_passes() -> None:
    level = level_after(16, 9, seed=1)
    assert level.passed is True, level.undecided + level.findings
    assert level.undecided == []
    for c in level.comparisons:
        assert c.ratio_low is not None and c.ratio_high is not None
        assert c.ratio_high <= c.margin if c.worse_when == "higher" else c.ratio_low >= c.margin


def test_an_interval_that_spans_the_margin_is_no_verdict_not_a_pass() -> None:
    """A candidate 5 % slower per token against a TPOT margin of 1.05: after the last look
    its interval spans the margin, so nothing is shown either way."""
    level = level_after(1, 9, seed=2, **FIVE_PERCENT_SLOWER, per_round=3)
    tpot = comparison(level, "tpot")
    assert tpot.outcome != "regressed"
    assert tpot.ratio_low is not None and tpot.ratio_high is not None
    assert tpot.ratio_low < tpot.margin < tpot.ratio_high
    assert level.passed is None, level.findings
    (why,) = [u for u in level.undecided if u.startswith("1 stream: tpot")]
    assert f"{tpot.ratio_low:.3f}–{tpot.ratio_high:.3f}" in why
    assert "spans the margin 1.05" in why
    assert "more rounds" in why and "quieter baseline" in why
    assert f"a margin of at least {tpot.ratio_high:.3g}" in why


def test_a_noisy_identical_candidate_gets_no_verdict_where_it_used_to_pass() -> None:
    """Absence of evidence is not evidence of absence: a wide interval around 1 decides
    nothing (the gate used to pass it because no regression was shown)."""
    level = level_after(
        1, 3, seed=3, candidate={"spread": 0.3}, baseline={"spread": 0.3}, per_round=3
    )
    assert all(c.outcome == "no regression" for c in level.comparisons)
    assert level.passed is None
    assert level.findings == [] and level.undecided


def test_a_shown_regression_still_fails() -> None:
    level = level_after(16, 3, seed=4, candidate={"scale": 1.2})
    assert level.passed is False
    assert comparison(level, "tpot").outcome == "regressed"


def test_the_power_of_the_run_is_in_its_figures_and_report() -> None:
    """The smallest regression this run could have shown: the margin moved by the
    interval's spread below (above, for throughput) its point estimate."""
    level = level_after(16, 9, seed=1)
    by_metric = {p.metric: p for p in level.power}
    assert set(by_metric) == {"tpot", "ttft", "itl_p99", "throughput"}
    tpot, c = by_metric["tpot"], comparison(level, "tpot")
    assert c.ratio is not None and c.ratio_low is not None
    assert tpot.detectable == pytest.approx(c.margin * c.ratio / c.ratio_low)
    assert tpot.detectable > tpot.margin
    assert by_metric["throughput"].detectable < by_metric["throughput"].margin
    assert 0 < tpot.half_width < 0.1
    shown = render_level(level)
    assert "smallest regression this run could show" in shown
    assert f"tpot ×{tpot.detectable:.3f}" in shown


def test_the_gate_reason_names_what_would_decide_a_level_without_verdict() -> None:
    level = level_after(1, 9, seed=2, **FIVE_PERCENT_SLOWER, per_round=3)
    figures = LatencyFigures(
        candidate_url="http://c", baseline_url="http://b", levels=[level], settings=SETTINGS
    )
    result = _result(figures, has_baseline=True)
    assert result.passed is None and result.verdict == "no verdict"
    assert result.reason.startswith("no verdict: ")
    assert "tpot" in result.reason and "spans the margin 1.05" in result.reason
    assert "more rounds" in result.reason
    assert any("smallest regression" in e for e in result.evidence)


@pytest.mark.parametrize("cut_as", ["error", "stop"])
def test_a_baseline_whose_streams_are_cut_after_one_token_gives_no_verdict(cut_as: str) -> None:
    """llama-cpp-python interrupts running streams at 16 (its `interrupt_requests`): 15 of
    16 answers end after one token on both sides, and TPOT over the one left per round
    would compare nothing."""
    cut = {"cut": 15, "cut_as": cut_as}
    level = level_after(16, 9, seed=5, candidate=cut, baseline=cut)
    assert level.passed is None, level.findings
    assert level.comparisons == []  # never a comparison over the survivors
    (why,) = level.undecided
    assert "135 of 144 baseline requests" in why
    assert "after one token" in why and "interrupt_requests" in why


def test_a_baseline_refusing_streams_for_want_of_slots_gives_no_verdict() -> None:
    level = level_after(16, 3, seed=6, candidate={"refused": 4}, baseline={"refused": 4})
    assert level.passed is None and level.comparisons == []
    (why,) = level.undecided
    assert "12 of 48 baseline requests" in why and "slots" in why and "HTTP 503" in why


def test_a_candidate_failing_more_than_a_broken_baseline_still_fails() -> None:
    level = level_after(16, 3, seed=7, candidate={"refused": 16}, baseline={"refused": 4})
    assert level.passed is False
    assert "48 of 48 candidate requests failed" in level.findings[0]


def test_a_baseline_under_the_failed_share_is_compared() -> None:
    """One refused request in 48 (2 %) is within the default 10 %."""
    rng = np.random.default_rng(8)
    runs = {
        CANDIDATE: [one_round(rng, 16) for _ in range(3)],
        BASELINE: [one_round(rng, 16, refused=1)] + [one_round(rng, 16) for _ in range(2)],
    }
    level = evaluate_level(runs, 16, LAST_LOOK, rounds=3)
    assert level.comparisons and not any("baseline requests" in u for u in level.undecided)


def test_a_baseline_that_fails_too_often_whatever_comes_next_stops_the_level() -> None:
    """At a look, when even flawless remaining rounds could not bring the baseline's
    failed share under the limit, more rounds cannot decide."""
    look = SETTINGS.at_each_look()
    broken = level_after(16, 3, seed=9, candidate={"refused": 8}, baseline={"refused": 8})
    assert is_certain(broken, look)  # 24 of 48 failed; 24 of 144 would still be 17 %
    mild = level_after(16, 3, seed=9, candidate={"refused": 2}, baseline={"refused": 2})
    assert mild.passed is None  # 6 of 48: 12.5 % now
    assert not is_certain(mild, look)  # 6 of 144 would be 4 %: more rounds may decide


@pytest.mark.parametrize(
    ("p95_ms", "upper_ms", "expected"),
    [(90.0, 99.0, True), (95.0, 120.0, None), (130.0, 150.0, False)],
)
def test_an_slo_is_met_missed_or_undecided(
    p95_ms: float, upper_ms: float, expected: bool | None
) -> None:
    """Met: the p95's upper bound is under the limit. Missed: the p95 itself is over it.
    In between the interval reaches past the limit: no verdict."""
    base = level_after(16, 3, seed=10)
    slo = SloCheck(
        metric="tpot", limit_ms=100.0, p95_ms=p95_ms, p95_upper_ms=upper_ms, met=upper_ms <= 100
    )
    level = _decide_level(
        base.model_copy(update={"baseline": None, "comparisons": [], "slo_checks": [slo]}),
        LAST_LOOK,
    )
    assert level.passed is expected, (level.findings, level.undecided)
    if expected is None:
        assert any("SLO" in u and "100" in u for u in level.undecided)
