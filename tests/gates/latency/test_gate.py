"""Latency gate against real simulated servers: an identical candidate is never failed,
a 20 % slower one fails, a stalling one yields recorded errors and a failed gate (no crash),
and the seed's shape holds (the fp16 14B loses to the GPTQ MoE at 1 stream, wins at 16)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from gates.common.settings import LatencySettings
from gates.latency.gate import run_latency
from tests.gates.conftest import HALF_TIME, StartServer

PROFILE = "gptq-30b-a3b-tp1"
# Four short rounds a side: a burst of load from other work on the machine lands in one round
# of one side, and finely interleaved rounds keep it from shifting a whole sample.
SMALL = LatencySettings(
    levels=[1, 4],
    max_tokens=12,
    rounds=4,
    min_requests_per_round=2,
    bootstrap_resamples=500,
    read_timeout_s=10,
    sequential=False,  # one look at the end: all of these few samples go to one test
)


def test_identical_candidate_is_never_failed_and_its_tpot_is_shown_within(
    model_server: StartServer,
) -> None:
    """An identical candidate passes only where the evidence shows it within every margin.
    With these few samples on a loaded 2-core machine the p99 ITL (at 1 stream about the
    largest of 88 gaps) and, at 4 streams, TTFT and throughput drawn from 4 rounds have
    intervals too wide to show that: such a level has no verdict, never a fail, and says
    why; TPOT at 1 stream is shown within its margin (on a quiet machine every time; a
    burst of other work can widen its interval past the margin by a hair, 1.0519 seen with
    two suites at once, and that run then has no verdict, never a pass)."""
    baseline = model_server(PROFILE, *HALF_TIME)
    candidate = model_server(PROFILE, *HALF_TIME, "--model-id", "twin")
    shown_within = []
    for _ in range(3):
        result = run_latency(candidate.url, baseline.url, SMALL)
        assert result.passed is not False, result.markdown()
        for level in result.figures.levels:
            assert level.candidate.n_failed == level.baseline.n_failed == 0
            assert {c.outcome for c in level.comparisons} == {"no regression"}
            assert (level.passed is None) == bool(level.undecided), level.undecided
            assert all("To decide:" in why for why in level.undecided)
        one = result.figures.levels[0]
        tpot = next(c for c in one.comparisons if c.metric == "tpot")
        assert tpot.ratio_high is not None, tpot.reason
        within = tpot.ratio_high <= tpot.margin
        assert within or one.passed is None, (tpot.reason, one.undecided)
        shown_within.append(within)
    assert any(shown_within), "TPOT at 1 stream was never shown within its margin"


# Enough requests that bursts of other work (load 4-5 on 2 cores) landing on a few baseline
# requests leave the 20 % loss significant: with 8 a side at one stream, such requests
# pulled the 98 % interval's low end down to 0.998, under the 1.05 margin, in one run of
# ten; with 18, none of 25 runs did.
SLOWER = SMALL.model_copy(update={"rounds": 6, "min_requests_per_round": 3})


def test_twenty_percent_slower_candidate_fails(model_server: StartServer) -> None:
    baseline = model_server(PROFILE, *HALF_TIME)
    candidate = model_server(PROFILE, *HALF_TIME, "--slowdown", "1.2")
    result = run_latency(candidate.url, baseline.url, SLOWER)
    assert result.passed is False
    one, four = ({c.metric: c for c in level.comparisons} for level in result.figures.levels)
    assert one["tpot"].outcome == "regressed"
    # 1.198-1.201 on a quiet machine; late wake-ups of either server under load move the
    # median ratio (1.148-1.220 in 25 runs at load 4-5)
    assert one["tpot"].ratio == pytest.approx(1.2, rel=0.06)
    # at 4 streams prefill steps interleave with decode, so per-request TPOT is bimodal and its
    # median jumps between the modes under load (1.06-1.23 seen): it must still show a loss,
    # and throughput, a ratio of sums, must show its size
    assert four["tpot"].ratio is not None and four["tpot"].ratio > 1
    assert four["throughput"].ratio == pytest.approx(1 / 1.2, rel=0.1)


def test_a_clear_regression_stops_at_the_first_look(model_server: StartServer) -> None:
    baseline = model_server(PROFILE, *HALF_TIME)
    candidate = model_server(PROFILE, *HALF_TIME, "--slowdown", "1.2")
    settings = SMALL.model_copy(
        update={
            "levels": [1],
            "rounds": 12,
            "min_rounds": 3,
            "min_requests_per_round": 4,
            "sequential": True,
        }
    )
    result = run_latency(candidate.url, baseline.url, settings)
    assert result.passed is False
    (level,) = result.figures.levels
    assert (level.rounds, level.max_rounds) == (3, 12)
    assert level.candidate.n_requests == 12
    assert "stopped early" in result.markdown()


@pytest.mark.parametrize(
    "keep_alive", [(), ("--keep-alive-ms", "100")], ids=["silent", "candle-style keep-alives"]
)
def test_stalled_streams_are_recorded_and_fail_the_gate(
    fresh_server: StartServer, keep_alive: tuple[str, ...]
) -> None:
    candidate = fresh_server(
        PROFILE, *HALF_TIME, "--fault", "stall", "--stall-after-tokens", "3", *keep_alive
    )
    settings = SMALL.model_copy(
        update={
            "levels": [2],
            "rounds": 1,
            "min_requests_per_round": 4,
            "read_timeout_s": 1.0,
            "warmup_requests_per_stream": 0,
        }
    )
    result = run_latency(candidate.url, None, settings)
    assert result.passed is False
    (level,) = result.figures.levels
    assert level.candidate.n_failed == level.candidate.n_requests == 4
    assert level.candidate.ttft_ms is None  # no sample: no summary, never 0 ms
    assert any("after 3 token events" in error for error in level.candidate.errors)
    assert "4 of 4 candidate requests failed" in result.reason


def test_no_baseline_and_no_slo_gives_no_verdict(model_server: StartServer) -> None:
    settings = SMALL.model_copy(update={"levels": [1], "rounds": 1})
    result = run_latency(model_server(PROFILE, *HALF_TIME).url, None, settings)
    assert result.passed is None
    assert result.figures.levels[0].candidate.little is not None


@pytest.mark.slow
def test_seed_shape_14b_loses_at_one_stream_and_wins_at_sixteen(
    model_server: StartServer,
) -> None:
    gptq, dense = model_server(PROFILE, *HALF_TIME), model_server("fp16-14b-tp2", *HALF_TIME)
    settings = LatencySettings(
        levels=[1, 16], max_tokens=16, rounds=2, min_requests_per_round=5, bootstrap_resamples=500
    )
    result = run_latency(dense.url, gptq.url, settings)
    one, sixteen = result.figures.levels
    tpot_one = next(c for c in one.comparisons if c.metric == "tpot")
    tpot_sixteen = next(c for c in sixteen.comparisons if c.metric == "tpot")
    assert tpot_one.outcome == "regressed" and tpot_one.ratio > 1.4  # 27.9 vs 17.6 ms
    assert tpot_sixteen.outcome == "no regression" and tpot_sixteen.ratio < 0.7  # 39.7 vs 71.5
    assert sixteen.candidate.throughput_tok_s > sixteen.baseline.throughput_tok_s


def test_unreachable_server_gives_no_verdict() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and is closed now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_latency(f"http://127.0.0.1:{port}", None, SMALL)
    assert result.passed is None
    assert "ConnectError" in result.reason and result.figures.levels == []


@contextlib.contextmanager
def _clients_of(url: str, streams: int) -> Iterator[list[int]]:
    """The Service's clients on a server: `streams` loops of greedy completions until the
    block ends; yields the count of answers they got (a test that loaded nothing proves
    nothing)."""
    answered, stop = [0], threading.Event()

    def loop() -> None:
        with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
            model = client.get("/v1/models").json()["data"][0]["id"]
            body = {"model": model, "prompt": "Tell a story.", "max_tokens": 24}
            while not stop.is_set():
                client.post("/v1/completions", json=body).raise_for_status()
                answered[0] += 1

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(streams)]
    for thread in threads:
        thread.start()
    try:
        yield answered
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)


def test_a_baseline_that_serves_others_while_measured_gives_no_pass(
    model_server: StartServer, fresh_server: StartServer
) -> None:
    """The live baseline keeps serving its Service's clients while the gate measures it: it
    is slower for load the candidate does not carry. The gate reads the baseline's own
    token counter around each candidate round, says how loaded it was, and a comparison
    over a loaded baseline is not a pass. An idle baseline is said to be idle."""
    candidate = model_server(PROFILE, *HALF_TIME, "--model-id", "twin")
    settings = SMALL.model_copy(update={"levels": [1]})
    quiet = run_latency(candidate.url, model_server(PROFILE, *HALF_TIME).url, settings)
    (level,) = quiet.figures.levels
    assert level.others is not None and level.others.seen and level.others.tokens == 0
    assert "baseline's load from others: 0.0 tokens/s, 0% of the gate's own" in quiet.markdown()
    busy = fresh_server(PROFILE, *HALF_TIME)
    with _clients_of(busy.url, streams=2) as answered:
        loaded = run_latency(candidate.url, busy.url, settings)
    assert answered[0] > 0, "the baseline's clients got no answer: nothing was loaded"
    (level,) = loaded.figures.levels
    assert loaded.passed is None, loaded.markdown()
    assert level.others is not None and level.others.tokens > 0
    assert any("tokens/s for others" in why for why in level.undecided), level.undecided
