"""A gate that could not tell is neither a pass nor a fail: side by side, any gate
without a verdict stops the handoff at the approval (a person weighs it); any fail rolls
back."""

from __future__ import annotations

from flows.evidence import Evidence, GateSummary


def _gate(name: str, verdict: str) -> GateSummary:
    return GateSummary(
        name=name, verdict=verdict, reason=f"{name} {verdict}", markdown="", figures={}
    )


def _evidence(*gates: GateSummary) -> Evidence:
    return Evidence(image="r@sha256:0", gates=list(gates), sha256="0")


def test_a_latency_gate_without_a_verdict_is_for_a_person_and_says_so() -> None:
    evidence = _evidence(_gate("smoke", "pass"), _gate("latency", "no verdict"))
    assert not evidence.passed
    assert evidence.for_a_person and [g.name for g in evidence.undecided] == ["latency"]
    assert evidence.verdict().startswith("NO VERDICT, for the approver to weigh: latency")


def test_every_gates_no_verdict_is_for_a_person_and_a_fail_is_not() -> None:
    for name in ("latency", "task", "parity"):
        evidence = _evidence(_gate("smoke", "pass"), _gate(name, "no verdict"))
        assert evidence.for_a_person and [g.name for g in evidence.undecided] == [name]
    failed = _evidence(_gate("latency", "no verdict"), _gate("parity", "fail"))
    assert not failed.for_a_person and failed.verdict().startswith("FAIL")


def test_all_passing_is_a_pass() -> None:
    evidence = _evidence(_gate("smoke", "pass"), _gate("latency", "pass"))
    assert evidence.passed and evidence.for_a_person and evidence.verdict().startswith("PASS")
