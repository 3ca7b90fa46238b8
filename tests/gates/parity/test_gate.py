"""Against a golden recorded from the fp32 reference, the parity gate passes the fp16
candidate, fails the `zero_key_band` candidate (whose answers stay well formed) naming the
first diverging tokens, and fails a candidate whose probe differs beyond tolerance."""

from __future__ import annotations

from gates.parity.gate import run_parity
from gates.parity.golden_format import Golden
from tests.gates.conftest import FAST, StartServer


def test_fp16_candidate_passes_against_fp32_golden(
    clef_golden: Golden, model_server: StartServer
) -> None:
    candidate = model_server("clef-flash-candle", *FAST)
    result = run_parity(candidate.url, clef_golden)
    assert result.passed, result.markdown()
    figures = result.figures
    assert figures.n_tokens_golden > 0
    assert figures.teacher_forced is not None and figures.teacher_forced.kl_mean > 0
    assert figures.probes and all(check.passed for check in figures.probes)
    assert figures.heads and all(check.passed for check in figures.heads)


def test_zero_key_band_fails_and_names_the_first_divergence(
    clef_golden: Golden, model_server: StartServer
) -> None:
    candidate = model_server("clef-flash-candle", *FAST, "--fault", "zero_key_band")
    result = run_parity(candidate.url, clef_golden)
    assert result.passed is False
    diverged = [p for p in result.figures.prompts if p.divergence and not p.passed]
    assert diverged, result.markdown()
    first = diverged[0].divergence
    assert first.golden_token != first.candidate_token
    assert any(f"first divergence at position {first.position}" in e for e in result.evidence)
    assert "| prompt | position | golden token | candidate token |" in result.markdown()
    # every response was well formed: the gate compared real tokens, not errors
    assert all(p.n_golden_tokens > 0 for p in result.figures.prompts)


def test_changed_probe_beyond_tolerance_fails(
    clef_golden: Golden, model_server: StartServer
) -> None:
    probes = dict(clef_golden.outputs.probes or {})
    assert "beta" in probes
    probes["beta"] *= 1.05  # the candidate's beta is now 4.8 % off: beyond 1e-2
    outputs = clef_golden.outputs.model_copy(update={"probes": probes})
    golden = clef_golden.model_copy(update={"outputs": outputs})
    candidate = model_server("clef-flash-candle", *FAST)
    result = run_parity(candidate.url, golden)
    assert result.passed is False
    assert any(e.startswith("probe beta:") for e in result.evidence), result.evidence
    assert [c.name for c in result.figures.probes if not c.passed] == ["beta"]


def test_a_required_comparison_the_candidate_cannot_give_is_no_verdict(
    clef_golden: Golden,
) -> None:
    from gates.common.settings import ParityTolerances
    from gates.parity.gate import _result, compare_outputs

    missing = "the server returns no prompt logprobs (echo with logprobs)"
    outputs = clef_golden.outputs.model_copy(
        update={"reference": None, "not_collected": {"teacher_forced": missing}}
    )

    def verdict(tolerances: ParityTolerances) -> bool | None:
        figures = compare_outputs(
            clef_golden, outputs, tolerances, candidate_model="m", candidate_url="u"
        )
        result = _result(figures, tolerances, clef_golden)
        assert f"not compared: teacher_forced: candidate: {missing}" in result.evidence
        return result.passed

    assert verdict(ParityTolerances()) is None  # the golden holds it: required by default
    assert verdict(ParityTolerances(require=["completions", "chat"])) is True
    assert verdict(ParityTolerances(require=["teacher_forced"])) is None
