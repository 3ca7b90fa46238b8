"""Parity comparisons (pure): greedy identity, the top-k near-tie rule at the first mismatch,
teacher-forced KL/agreement, probes within relative tolerance and exact head answers."""

from __future__ import annotations

import math

import pytest

from gates.parity.compare import (
    compare_completion,
    compare_heads,
    compare_probes,
    compare_teacher_forced,
    position_kl,
)
from gates.parity.golden_format import Alternative, Completion, TokenStep


def step(token: int, top: dict[int, float]) -> TokenStep:
    alternatives = [Alternative(token_id=t, piece=chr(t), logprob=lp) for t, lp in top.items()]
    return TokenStep(
        token_id=token, logprob=top.get(token, -20.0), top=alternatives, piece=chr(token)
    )


A, B, C, D = 97, 98, 99, 100
CONFIDENT_A = {A: -0.01, C: -5.0, D: -6.0}
TIE_A = {A: -0.69, B: -0.70}
TIE_B = {B: -0.69, A: -0.70}
# both tokens in each other's top-k, but each model clearly preferred its own (flat, shifted)
FLAT_A = {A: -0.9, B: -1.6, C: -2.0, D: -2.1}
FLAT_B = {B: -0.9, A: -1.5, C: -2.0, D: -2.1}


def completion(*steps: TokenStep) -> Completion:
    return Completion(prompt_id="p1", text="".join(s.piece or "" for s in steps), steps=list(steps))


COMPLETION_CASES = [
    # (name, golden steps, candidate steps, divergence position or None, passes)
    ("identical", [step(A, CONFIDENT_A)] * 3, [step(A, CONFIDENT_A)] * 3, None, True),
    (
        "near tie at 1",
        [step(A, CONFIDENT_A), step(A, TIE_A)],
        [step(A, CONFIDENT_A), step(B, TIE_B)],
        1,
        True,
    ),
    ("confident token lost at 0", [step(A, CONFIDENT_A)], [step(B, {B: -0.01, D: -6.0})], 0, False),
    ("swap inside top-k but 0.6-0.7 nats apart", [step(A, FLAT_A)], [step(B, FLAT_B)], 0, False),
    ("candidate stops early", [step(A, CONFIDENT_A)] * 2, [step(A, CONFIDENT_A)], 1, False),
]


@pytest.mark.parametrize(("name", "golden", "candidate", "position", "passes"), COMPLETION_CASES)
def test_greedy_identity_and_top_k_rule(
    name: str,
    golden: list[TokenStep],
    candidate: list[TokenStep],
    position: int | None,
    passes: bool,
) -> None:
    result = compare_completion(completion(*golden), completion(*candidate), top_k=5, max_gap=0.1)
    assert result.passed is passes, name
    assert (result.divergence and result.divergence.position) == position


def test_divergence_report_names_both_tokens() -> None:
    result = compare_completion(
        completion(step(A, CONFIDENT_A)),
        completion(step(B, {B: -0.01, D: -6.0})),
        top_k=5,
        max_gap=0.1,
    )
    text = result.divergence.describe("p1")
    assert "position 0" in text and "token 97 'a'" in text and "token 98 'b'" in text
    assert "not in each other's top-k" in text


def test_divergence_records_how_strongly_each_side_preferred_its_token() -> None:
    result = compare_completion(
        completion(step(A, FLAT_A)), completion(step(B, FLAT_B)), top_k=5, max_gap=0.1
    )
    d = result.divergence
    assert d.in_each_others_top_k and not d.near_tie
    assert (d.golden_gap, d.candidate_gap) == pytest.approx((0.7, 0.6))
    assert "preferred by 0.700 and 0.600 nats" in d.describe("p1")


def test_top_k_rule_uses_only_the_k_best() -> None:
    golden = {A: -0.1, C: -3.0, D: -4.0, B: -9.0}
    result = compare_completion(
        completion(step(A, golden)), completion(step(B, TIE_B)), top_k=3, max_gap=0.1
    )
    assert not result.passed  # B is the golden's 4th choice


@pytest.mark.parametrize(
    ("golden", "candidate", "expected"),
    [
        (CONFIDENT_A, CONFIDENT_A, 0.0),
        (
            {A: math.log(0.5), B: math.log(0.5)},
            {A: math.log(0.25), B: math.log(0.75)},
            0.5 * math.log(2) + 0.5 * math.log(0.5 / 0.75),
        ),
    ],
)
def test_position_kl(
    golden: dict[int, float], candidate: dict[int, float], expected: float
) -> None:
    assert position_kl(golden, candidate) == pytest.approx(expected, abs=1e-9)


def test_teacher_forced_figures() -> None:
    golden = [step(A, CONFIDENT_A), step(A, TIE_A)]
    candidate = [step(A, CONFIDENT_A), step(A, TIE_B)]
    figures = compare_teacher_forced(golden, candidate)
    assert figures.top_token_agreement == 0.5
    assert figures.kl_mean > 0
    assert compare_teacher_forced(golden, [step(B, TIE_B), step(A, TIE_A)]) is None


@pytest.mark.parametrize(
    ("golden", "candidate", "rel_tol", "passes"),
    [
        (8647.021, 8646.982, 2e-3, True),  # the seed's beta: 4.5e-6 relative
        (8647.021, 8560.0, 2e-3, False),
        (0.5, 0.504, 1e-2, True),
        (0.5, 0.51, 1e-2, False),
    ],
)
def test_probe_tolerance(golden: float, candidate: float, rel_tol: float, passes: bool) -> None:
    (check,) = compare_probes({"beta": golden}, {"beta": candidate}, rel_tol=rel_tol)
    assert check.passed is passes


def test_missing_probe_fails() -> None:
    (check,) = compare_probes({"beta": 1.0}, {}, rel_tol=1e-2)
    assert not check.passed and check.candidate is None


def test_heads_must_match_exactly() -> None:
    checks = compare_heads({"risk": "medium", "bucket": "2"}, {"risk": "medium", "bucket": "3"})
    assert [(c.name, c.passed) for c in checks] == [("bucket", False), ("risk", True)]


def text_step(piece: str, top: list[tuple[str, float]]) -> TokenStep:
    """A position as llama.cpp's server reports it: token text, top-k keyed by text."""
    logprob = next((lp for t, lp in top if t == piece), None)
    alternatives = [Alternative(piece=t, logprob=lp) for t, lp in top]
    return TokenStep(piece=piece, logprob=logprob, top=alternatives)


def test_without_token_ids_tokens_are_compared_by_text() -> None:
    golden = completion(text_step("a", [("a", -0.69), ("b", -0.70)]))
    candidate = completion(text_step("b", [("b", -0.69), ("a", -0.70)]))
    result = compare_completion(golden, candidate, top_k=5, max_gap=0.1)
    assert result.basis == "token text" and result.passed
    assert result.divergence and result.divergence.golden_token == "'a'"


def test_alternatives_sharing_a_text_add_up_instead_of_overwriting() -> None:
    # two ids that both print as "" (special or partial UTF-8 tokens): half the mass each
    shared = text_step("", [("", math.log(0.4)), ("", math.log(0.4)), ("x", math.log(0.2))])
    whole = text_step("", [("", math.log(0.8)), ("x", math.log(0.2))])
    figures = compare_teacher_forced([shared], [whole])
    assert figures is not None and figures.kl_mean == pytest.approx(0.0, abs=1e-9)


def test_another_chat_template_fails_even_with_identical_tokens() -> None:
    golden = Completion(
        prompt_id="c", api="chat", text="a", steps=[step(A, CONFIDENT_A)], prompt_tokens=31
    )
    candidate = golden.model_copy(update={"prompt_tokens": 27})
    result = compare_completion(golden, candidate, top_k=5, max_gap=0.1)
    assert result.divergence is None and not result.passed
    assert "31 tokens, the candidate's 27: another chat template" in result.describe_template()


def test_answers_without_logprobs_are_compared_as_text() -> None:
    golden = Completion(prompt_id="c", api="chat", text="Ready.", steps=[])
    same = compare_completion(golden, golden.model_copy(), top_k=5, max_gap=0.1)
    assert same.passed and same.basis == "text"
    other = compare_completion(
        golden, golden.model_copy(update={"text": "Ready!"}), top_k=5, max_gap=0.1
    )
    assert not other.passed and other.divergence and other.divergence.position == 5
    assert "no logprobs to judge a near-tie" in other.divergence.describe("c")


def test_without_a_gap_limit_divergences_are_judged_by_top_k_alone() -> None:
    # vLLM's check_logprobs_close: each side's token in the other's top-k
    swap = compare_completion(
        completion(step(A, FLAT_A)), completion(step(B, FLAT_B)), top_k=5, max_gap=None
    )
    assert swap.passed
    lost = compare_completion(
        completion(step(A, CONFIDENT_A)),
        completion(step(B, {B: -0.01, D: -6.0})),
        top_k=5,
        max_gap=None,
    )
    assert not lost.passed


def test_perplexity_counts_every_position_a_side_ranked_below_its_top_k() -> None:
    """A server that gives a prompt token's logprob only from its top-k (llama-cpp-python's
    echo) leaves it out exactly where that side found the token unlikely: the ratio must
    count those positions, at the bound the listed alternatives give, not drop them."""
    golden = [text_step("r", [("r", -0.5), ("s", -1.5)]) for _ in range(20)]
    ranked_low = text_step("r", [("s", -0.2), ("t", -4.0)])  # "r" below -4.0, unlisted
    candidate = [text_step("r", [("r", -0.5), ("s", -1.5)]) for _ in range(10)]
    candidate += [ranked_low] * 10
    figures = compare_teacher_forced(golden, candidate)
    assert figures is not None and figures.perplexity_ratio is not None
    # at least exp(mean(0 x 10, 3.5 x 10)): the candidate is far less sure of the text
    assert figures.perplexity_ratio >= math.exp(1.75) - 1e-9, figures.perplexity_ratio
    assert (figures.perplexity_positions, figures.perplexity_bounded) == (20, 10)


def _ended(*steps: TokenStep, finish: str) -> Completion:
    return Completion(
        prompt_id="p1", text="".join(s.piece or "" for s in steps), steps=list(steps),
        finish_reason=finish,
    )  # fmt: skip


SURE = text_step("a", [("a", -0.01), ("b", -6.0)])


@pytest.mark.parametrize(
    ("going", "finish", "passes"),
    [
        # the other side was nearly as ready to end (the end token renders as nothing)
        ([("b", -0.60), ("", -0.65), ("c", -3.0)], "stop", True),
        # it was sure to go on: ending there is another answer
        ([("b", -0.05), ("", -4.0), ("c", -5.0)], "stop", False),
        # it never considered ending
        ([("b", -0.60), ("c", -0.65)], "stop", False),
        # the shorter one ran out of tokens, it did not choose to end
        ([("b", -0.60), ("", -0.65)], "length", False),
    ],
)
def test_an_early_end_is_judged_as_a_near_tie_on_the_side_that_went_on(
    going: list[tuple[str, float]], finish: str, passes: bool
) -> None:
    """A server lists no step for the end token it chose (llama.cpp), so an end is judged
    where it can be: the side that went on must have had ending within the gap."""
    longer = completion(SURE, SURE, text_step(going[0][0], going))
    shorter = _ended(SURE, SURE, finish=finish)
    for golden, candidate in ((shorter, longer), (longer, shorter)):
        result = compare_completion(golden, candidate, top_k=5, max_gap=0.1)
        assert result.divergence is not None and result.divergence.position == 2
        assert result.passed is passes, (finish, going, result.divergence)


def test_a_token_that_renders_as_nothing_is_no_end_where_bytes_tell_them_apart() -> None:
    """A partial UTF-8 token (the first bytes of a character) renders as nothing, as the
    end does; where a server gives bytes, only the token of no bytes ends."""

    def with_bytes(piece_bytes: list[int], top: list[tuple[list[int], float]]) -> TokenStep:
        alternatives = [Alternative(piece="", bytes=b, logprob=lp) for b, lp in top]
        return TokenStep(piece="", bytes=piece_bytes, logprob=top[0][1], top=alternatives)

    sure = TokenStep(piece="a", bytes=[97], logprob=-0.01, top=[
        Alternative(piece="a", bytes=[97], logprob=-0.01)])  # fmt: skip
    partial = with_bytes([0xE4], [([0xE4], -0.01), ([0xE5], -5.0), ([], -9.0)])
    shorter = _ended(sure, finish="stop")
    longer = completion(sure, partial)
    result = compare_completion(shorter, longer, top_k=5, max_gap=0.1)
    assert result.basis == "token bytes" and not result.passed, result.divergence


def test_the_token_the_other_side_chose_is_never_taken_for_its_end() -> None:
    """On a server that gives text alone, the side that went on chose a token that renders
    as nothing (the first bytes of a character): that is not a wish to end."""
    shorter = _ended(SURE, finish="stop")
    longer = completion(SURE, text_step("", [("", -0.01), ("b", -5.0)]))
    assert not compare_completion(shorter, longer, top_k=5, max_gap=0.1).passed


def test_positions_where_the_golden_ranked_the_token_below_its_top_k_are_left_out() -> None:
    """There the golden gives no figure to compare with: two unrelated tails (or a tail and
    the candidate's own figure) would make a ratio of noise, in either direction."""
    exact = text_step("r", [("r", -0.5), ("s", -1.5)])
    golden = [exact] * 10 + [text_step("r", [("s", -0.1), ("t", -2.0)])] * 10
    candidate = [exact] * 10 + [text_step("r", [("s", -0.1), ("t", -9.0)])] * 5
    candidate += [text_step("r", [("r", -3.0), ("s", -0.1)])] * 5
    figures = compare_teacher_forced(golden, candidate)
    assert figures is not None and figures.perplexity_ratio == pytest.approx(1.0)
    assert (figures.perplexity_positions, figures.perplexity_bounded) == (10, 0)


def test_the_bound_ignores_an_entry_beyond_the_top_k_the_server_was_asked_for() -> None:
    """llama-cpp-python's echo adds to each position's top-k one more entry, the previous
    token's logprob under this position's distribution (often far below the top-k): the
    bound for a token the candidate ranked below its top-k is the k-th listed, not that."""
    golden = [text_step("r", [("r", -0.5), ("s", -1.5), ("t", -2.0)]) for _ in range(10)]
    candidate = [text_step("r", [("r", -0.5), ("s", -1.5), ("t", -2.0)]) for _ in range(9)]
    candidate.append(text_step("r", [("s", -0.5), ("t", -0.8), ("prev", -14.0)]))  # k = 2
    figures = compare_teacher_forced(golden, candidate, top_k=2)
    assert figures is not None and figures.perplexity_bounded == 1
    # the one bounded position counts at -0.8, the 2nd listed: a gap of 0.3, not 13.5
    assert figures.perplexity_ratio == pytest.approx(math.exp(0.3 / 10))
