"""A golden recorded by token text (what every engine gives: llama.cpp lists no ids) is
compared with a candidate on the same basis, even where the candidate could give ids; a
golden by ids and a candidate without them have no basis, and say so."""

from __future__ import annotations

from gates.common.settings import ParityTolerances
from gates.parity.gate import Candidate, judge, run_parity
from gates.parity.golden import record_golden
from gates.parity.golden_format import GoldenSettings
from tests.gates.conftest import FAST, PARITY_PROMPTS, REFERENCE_TEXT, StartServer


def test_a_golden_by_text_is_compared_by_text_with_a_candidate_that_gives_ids(
    model_server: StartServer,
) -> None:
    reference = model_server("clef-flash-pytorch", *FAST)
    golden = record_golden(
        reference.url,
        PARITY_PROMPTS,
        reference_file=REFERENCE_TEXT,
        settings=GoldenSettings(token_ids=False),
    )
    assert not golden.server.token_ids
    assert all(s.token_id is None for c in golden.outputs.completions for s in c.steps)
    candidate = model_server("clef-flash-candle", *FAST)  # offers ids
    result = run_parity(candidate.url, golden)
    assert result.passed, result.markdown()
    figures = result.figures
    assert figures is not None and figures.teacher_forced is not None
    assert figures.teacher_forced.basis == "token text"
    # completions by text; chat turns by bytes, which both sides' chat logprobs carry
    assert {p.basis for p in figures.prompts} == {"token text", "token bytes"}


def test_a_golden_by_ids_against_a_candidate_of_text_alone_gets_no_verdict_and_says_why(
    model_server: StartServer,
) -> None:
    """Not "another model": the two sides name the same tokens differently."""
    server = model_server("clef-flash-pytorch", *FAST)
    by_ids = record_golden(server.url, PARITY_PROMPTS, reference_file=REFERENCE_TEXT)
    by_text = record_golden(
        server.url,
        PARITY_PROMPTS,
        reference_file=REFERENCE_TEXT,
        settings=GoldenSettings(token_ids=False),
    )
    assert by_ids.server.token_ids
    # what a server that lists no ids (llama.cpp) gives, from the same weights
    candidate = Candidate(server.url, by_text.model_id, by_text.server, by_text.outputs)
    result = judge(by_ids, candidate, ParityTolerances())
    assert result.verdict == "no verdict", result.markdown()
    assert "no common token identity" in result.reason and "--token-text" in result.reason
