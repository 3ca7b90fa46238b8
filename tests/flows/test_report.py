"""The gate report as a person reads it: the verdict and its reason first, one heading
per gate, figures rounded to what their precision means."""

from __future__ import annotations

import re

from flows.evidence import Evidence
from flows.gating import _summary
from flows.report.markdown import record_markdown
from flows.report.record import HandoffRecord
from gates.common import shown
from gates.latency.compare import Comparison
from gates.latency.report import _comparison_row
from gates.parity.gate import ParityResult
from gates.parity.report import ParityFigures
from gates.smoke import SmokeFigures, SmokeResult

RAW_MS = 199.53844399992704


def _smoke() -> SmokeResult:
    figures = SmokeFigures(
        url="http://127.0.0.1:9", model_id="m", listed_models=["m"], completion_ms=RAW_MS
    )
    return SmokeResult(name="smoke", passed=True, reason="lists 'm' and answered", figures=figures)


def _parity_fail() -> ParityResult:
    figures = ParityFigures(golden_model="m", candidate_model="m", candidate_url="http://x")
    return ParityResult(
        name="parity", passed=False, reason="prompt p1 diverges at token 3", figures=figures
    )


def _evidence() -> Evidence:
    return Evidence(
        image="r/i@sha256:ab", gates=[_summary(_smoke()), _summary(_parity_fail())], sha256="00"
    )


def test_figures_are_rounded_to_their_precision() -> None:
    assert shown.ms(RAW_MS) == "199.5"
    assert shown.seconds(12.3456) == "12.3"
    assert [shown.ratio(v) for v in (1.0012345, 0.012345, 123.456, 0.0)] == [
        "1.00", "0.0123", "123", "0",
    ]  # fmt: skip
    assert shown.figure("completion_ms", RAW_MS) == "199.5"
    assert shown.figure("n_ok", 3) == "3" and shown.figure("url", None) == "n/a"


def test_no_figure_prints_with_float_noise() -> None:
    text = _evidence().markdown() + _smoke().markdown()
    assert "199.5 " in text or "199.5|" in text.replace(" ", "")
    assert not re.search(r"\d\.\d{5,}", text), text


def test_one_heading_per_gate_and_the_verdict_first() -> None:
    text = _evidence().markdown()
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings == ["### smoke: pass", "### parity: fail"], headings
    assert text.startswith("**Verdict:** FAIL: parity fail: prompt p1 diverges at token 3")
    # under each heading, its reason comes before its figures
    after = text.split("### parity: fail", 1)[1].lstrip()
    assert after.startswith("prompt p1 diverges at token 3"), after[:80]


def test_latency_ratios_have_three_significant_digits() -> None:
    row = _comparison_row(
        Comparison(
            metric="tpot",
            worse_when="higher",
            margin=1.1,
            ratio=1.0234567,
            ratio_low=0.98765,
            ratio_high=1.0612,
            outcome="no regression",
            reason="",
        )
    )
    assert "| 1.02 | 0.988–1.06 |" in row, row


def test_the_record_leads_with_its_outcome_and_cause() -> None:
    entry = HandoffRecord(
        handoff_id="h1", spec="s", namespace="ns", service="svc", strategy="side-by-side",
        outcome="rolled-back", cause="gates did not pass: parity fail",
        durations_s={"warm": 12.345678, "gates": RAW_MS}, started_at="t0", finished_at="t1",
    )  # fmt: skip
    lines = record_markdown(entry, _evidence()).splitlines()
    assert lines[0].endswith(": rolled-back")
    assert lines[1] == "**Cause:** gates did not pass: parity fail"
    assert lines[3].startswith("**Gates:** FAIL: parity fail")
    assert "- durations (s): warm 12.3, gates 199.5" in lines
