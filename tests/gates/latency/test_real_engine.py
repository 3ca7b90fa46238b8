"""The latency gate on a real engine (llama.cpp serving SmolLM2-135M, no adapter): an
identical candidate is never failed, and a candidate 15 % slower per token never passes.

The slower candidate is the same engine and model whose every evaluation (the prompt's, then
each token's) waits 15 % of the work since the previous wait, its own and the Python around
it (`ServerOptions.eval_stretch`; measured on a quiet machine: inter-token latency ×1.15):
slower by that share whatever the machine's load, as a slower kernel would be. The settings are the
gate's defaults at one stream: llama-cpp-python answers one request at a time and queues the
rest, so more streams measure its queue, not its tokens."""

from __future__ import annotations

import pytest

from gates.common.settings import LatencySettings
from gates.latency.gate import run_latency
from sandbox.engines.llamacpp import ServerOptions, ServerPool

ONE_STREAM = LatencySettings(levels=[1])
pytestmark = pytest.mark.timeout(600)


def test_an_identical_candidate_is_never_failed(llamacpp: ServerPool) -> None:
    live = llamacpp.get("q4_1")
    twin = llamacpp.get("q4_1", instance="twin")
    result = run_latency(twin.url, live.url, ONE_STREAM)
    assert result.passed is not False, result.markdown()
    (level,) = result.figures.levels
    assert level.candidate.n_failed == level.baseline.n_failed == 0
    assert {c.outcome for c in level.comparisons} == {"no regression"}, result.markdown()
    # no pass without evidence: a level that passed showed every metric within its margin
    assert (level.passed is None) == bool(level.undecided), level.undecided
    # llama-cpp-python keeps no token counter: the baseline's other load is named unseen
    assert f"GET {live.url}/metrics answered HTTP 404" in result.markdown(), result.markdown()


def test_a_candidate_fifteen_percent_slower_per_token_never_passes(llamacpp: ServerPool) -> None:
    live = llamacpp.get("q4_1")
    slower = llamacpp.get("q4_1", ServerOptions(eval_stretch=0.15))
    result = run_latency(slower.url, live.url, ONE_STREAM)
    assert result.passed is not True, result.markdown()
    (level,) = result.figures.levels
    # TPOT was never shown within its margin: the interval reaches past it. (The ratio
    # itself is the machine's to move: beside other work its interval is ±20 %.)
    tpot = next(c for c in level.comparisons if c.metric == "tpot")
    assert tpot.ratio_high is not None and tpot.ratio_high > tpot.margin, result.markdown()
    if result.passed is None:  # it could not show the loss: it says what would
        assert any("To decide:" in why for why in level.undecided), level.undecided


def test_a_level_whose_streams_the_engine_cuts_on_both_sides_gets_no_verdict_with_its_cause(
    llamacpp: ServerPool,
) -> None:
    """llama-cpp-python's own default (`interrupt_requests` true) ends a running stream when
    the next request comes: at 16 streams nearly every answer ends after one token on both
    sides, and TPOT over the few that finish would compare nothing."""
    cutting = ServerOptions(interrupt_requests=True)
    live = llamacpp.get("q4_1", cutting)
    twin = llamacpp.get("q4_1", cutting, instance="twin")
    settings = LatencySettings(levels=[16], rounds=3)
    result = run_latency(twin.url, live.url, settings)
    assert result.passed is None, result.markdown()
    (level,) = result.figures.levels
    assert level.comparisons == [], result.markdown()  # never a comparison over the survivors
    (why,) = level.undecided
    assert "baseline requests" in why and "interrupt_requests" in why, why
