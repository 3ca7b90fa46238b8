"""The perplexity check decides on an interval, not a point: over a short reference text a
benign change's noise alone can put the point past the limit, and a small point says
nothing when the text cannot show a change of the limit's size. Pass only when shown
within, fail only when shown beyond, otherwise no verdict naming what would decide it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gates.common.settings import ParityTolerances
from gates.http.capabilities import Capabilities
from gates.parity.gate import _result, compare_outputs
from gates.parity.golden_format import Alternative, Golden, GoldenSettings, ModelOutputs, TokenStep
from gates.parity.perplexity import check_perplexity


def position(logprob: float) -> TokenStep:
    """The text's token "r" at `logprob`, the rest of the mass on "s": the same argmax and
    near-equal distributions on both sides, so only the perplexity ratio can tell."""
    other = math.log1p(-math.exp(logprob)) if logprob < 0 else -30.0
    return TokenStep(
        piece="r",
        logprob=logprob,
        top=[Alternative(piece="r", logprob=logprob), Alternative(piece="s", logprob=other)],
    )


def verdict(gaps: list[float]) -> tuple[bool | None, list[str], str]:
    """The parity verdict of a candidate whose logprob of the text's token is the golden's
    (-1.0 at every position) less each gap."""
    golden_steps = [position(-1.0) for _ in gaps]
    golden = Golden(
        model_id="m",
        source_url="http://127.0.0.1:1",
        recorded_at="2026-12-07T00:00:00+00:00",
        server=Capabilities(model_ids=["m"], completions=True, chat=False),
        settings=GoldenSettings(),
        outputs=ModelOutputs(completions=[], reference=golden_steps),
    )
    candidate = ModelOutputs(completions=[], reference=[position(-1.0 - g) for g in gaps])
    tolerances = ParityTolerances()
    figures = compare_outputs(golden, candidate, tolerances, candidate_model="m", candidate_url="u")
    result = _result(figures, tolerances, golden)
    return result.passed, result.evidence, result.reason


def noise(n: int, mean: float, spread: float, seed: int = 1) -> list[float]:
    draws = np.random.default_rng(seed).normal(0.0, spread, n)
    return list(draws - draws.mean() + mean)  # exactly this mean


def test_a_point_past_the_limit_over_a_short_text_is_no_verdict_not_a_fail() -> None:
    """Flash attention on llama.cpp over the built-in 45-position text: point 1.06, every
    position's change small and either way."""
    passed, evidence, reason = verdict(noise(45, 0.058, 0.25))
    assert passed is None, reason
    assert "spans the |log| limit 0.03" in reason and "longer reference text" in reason, reason
    assert not any("surely above" in e for e in evidence)


def test_a_point_within_the_limit_that_the_text_cannot_show_is_no_verdict_not_a_pass() -> None:
    passed, _, reason = verdict(noise(45, 0.01, 0.25))
    assert passed is None, reason
    assert "positions would show it within" in reason, reason


def test_benign_noise_over_a_long_text_is_shown_within_and_passes() -> None:
    passed, _, reason = verdict(noise(600, 0.004, 0.12))
    assert passed is True, reason


def test_a_shift_past_the_limit_shown_by_the_interval_fails() -> None:
    passed, evidence, reason = verdict(noise(45, 0.2, 0.1))
    assert passed is False, reason
    assert any("surely above 0.03" in e for e in evidence), evidence


def test_identical_logprobs_pass_however_short_the_text() -> None:
    assert verdict([0.0] * 5)[0] is True


@pytest.mark.parametrize("n", [3, 9, 15])
def test_too_few_positions_for_an_interval_show_nothing_unless_every_gap_is_equal(n: int) -> None:
    check = check_perplexity(noise(n, 0.0, 0.1), limit=0.03, confidence=0.95)
    assert check is not None and check.outcome == "undecided"
    shifted = check_perplexity([0.5] * n, limit=0.03, confidence=0.95)
    assert shifted is not None and shifted.outcome == "beyond"


def test_the_interval_draws_runs_of_positions_so_a_drifting_text_is_not_overconfident() -> None:
    """Neighbouring positions move together: a text whose gaps drift in long runs has a
    wider interval than the same gaps shuffled."""
    runs = list(np.repeat(noise(20, 0.0, 0.2, seed=3), 16))
    shuffled = list(np.random.default_rng(0).permutation(runs))
    drifting = check_perplexity(runs, limit=0.03, confidence=0.95)
    mixed = check_perplexity(shuffled, limit=0.03, confidence=0.95)
    assert drifting is not None and mixed is not None
    assert drifting.half_width > 1.5 * mixed.half_width
