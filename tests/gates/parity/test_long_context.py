"""Long-context parity (pure parts): prompts cut before a word, the trend statistic, and the
findings on figures a candidate could give: flat noise passes, KL that grows with position
fails even with a small mean, a refusal of a prompt the golden answered fails."""

from __future__ import annotations

import math

from gates.common.settings import ParityTolerances
from gates.http.capabilities import Capabilities
from gates.parity.gate import context_shortfall
from gates.parity.golden_format import (
    Alternative,
    ContextProbe,
    Golden,
    GoldenSettings,
    LongContextOutputs,
    LongContextSettings,
    ModelOutputs,
    TokenStep,
    default_text,
)
from gates.parity.long_context import compare, trend, word_cut
from gates.parity.report import ParityFigures

TEXT = "The ferry left at nine.  It came back\nat noon, late."


def test_word_cut_ends_before_whitespace_and_never_inside_a_word() -> None:
    assert word_cut(TEXT, 6) == 3  # "The fe|rry" -> "The"
    assert word_cut(TEXT, 25) == 23  # two spaces: cut before both
    assert TEXT[: word_cut(TEXT, 33)] == "The ferry left at nine.  It came"
    assert word_cut(TEXT, 1000) == len(TEXT)
    assert word_cut(TEXT, 2) == 0  # no word fits
    for n in range(len(TEXT)):
        cut = word_cut(TEXT, n)
        assert cut <= n and (cut == 0 or (not TEXT[cut - 1].isspace() and TEXT[cut].isspace()))


def test_the_built_in_text_reaches_the_default_context() -> None:
    text = default_text()
    assert len(text) > LongContextSettings().tokens * 5  # ~4.3 characters a token
    assert text.isascii()


def test_trend_sees_growth_and_not_noise() -> None:
    positions = list(range(32))
    rho, p = trend(positions, [0.01 * (1 + i / 8) + 0.004 * math.sin(i * 7) for i in positions])
    assert rho > 0.8 and p < 0.001
    rho, p = trend(positions, [0.02 + 0.01 * math.sin(i * 7.3) for i in positions])
    assert abs(rho) < 0.3 and p > 0.05
    assert trend(positions, [0.0] * 32) == (0.0, 1.0)  # ties everywhere: no evidence


def probe(chars: int, tokens: int, kl_shift: float) -> ContextProbe:
    """A probe whose top-2 puts `kl_shift` more mass on the second token."""
    first = math.log(0.8 - kl_shift)
    second = math.log(0.1 + kl_shift)
    top = [Alternative(piece=" a", logprob=first), Alternative(piece=" b", logprob=second)]
    return ContextProbe(
        chars=chars, prompt_tokens=tokens, step=TokenStep(piece=" a", logprob=first, top=top)
    )


def figures_for(shifts: list[float], *, refused: str | None = None) -> ParityFigures:
    golden = LongContextOutputs(probes=[probe(i * 40, i * 10, 0.0) for i in range(len(shifts))])
    probes = [probe(i * 40, i * 10, s) for i, s in enumerate(shifts)]
    candidate = LongContextOutputs(probes=probes[: len(probes) // 2] if refused else probes)
    if refused:
        candidate.refused = refused
    long = compare(golden, candidate, LongContextSettings(text=TEXT))
    return ParityFigures(
        golden_model="m", candidate_model="m", candidate_url="u", long_context=long
    )


def test_flat_noise_passes() -> None:
    figures = figures_for([0.01 + 0.005 * math.sin(i * 5.1) for i in range(32)])
    assert figures.failures(ParityTolerances()) == []
    assert figures.compared_checks() == ["long_context"]
    assert "| 0-70 | 8 |" in figures.markdown()


def test_kl_growing_with_position_fails_though_its_mean_is_small() -> None:
    shifts = [0.002 + 0.004 * i for i in range(32)]
    figures = figures_for(shifts)
    assert figures.long_context is not None
    kl = figures.long_context.kl_along
    assert sum(kl) / len(kl) < ParityTolerances().kl_mean_max  # the mean alone would pass
    failures = figures.failures(ParityTolerances())
    assert any("grows with position" in f for f in failures), failures


def test_a_prompt_refused_that_the_golden_answered_fails() -> None:
    figures = figures_for([0.0] * 32, refused="a prompt of 640 characters: HTTP 400: too long")
    failures = figures.failures(ParityTolerances())
    assert failures and "context is shorter" in failures[0], failures
    assert "refused a prompt of 640 characters" in figures.markdown()


def golden_with(capped: str | None) -> Golden:
    planned = LongContextSettings(text=TEXT, capped=capped)
    return Golden(
        model_id="m",
        source_url="u",
        recorded_at="now",
        server=Capabilities(model_ids=["m"], completions=True, chat=False),
        settings=GoldenSettings(long_context=planned),
        outputs=ModelOutputs(completions=[]),
    )


def test_probes_short_of_the_services_context_give_no_pass() -> None:
    figures = figures_for([0.01] * 32)  # reaches 310 tokens
    wanted = ParityTolerances(context_tokens=2048)
    why = context_shortfall(figures, wanted, golden_with(None))
    assert why and "reached 310 tokens" in why and "--context-tokens 2048" in why
    assert (
        context_shortfall(figures, ParityTolerances(context_tokens=320), golden_with(None)) is None
    )
    assert context_shortfall(figures, ParityTolerances(), golden_with(None)) is None
    # the golden's own server took no longer prompt: that is the Service's context
    refused = golden_with("the server refused 9000 characters (too long)")
    assert context_shortfall(figures, wanted, refused) is None
    assert "the text ends there" in (
        context_shortfall(figures, wanted, golden_with("the text ends there")) or ""
    )
