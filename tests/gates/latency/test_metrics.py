"""Per-request metrics obey their definitions on recorded stamps: E2EL − TTFT equals the sum
of the ITL gaps exactly, TPOT spreads that over N_out − 1 tokens, failed requests are counted
but never measured, and an empty sample is "no summary", not 0 ms."""

from __future__ import annotations

import pytest

from gates.http.finish import check_complete
from gates.http.records import RequestRecord
from gates.latency.metrics import compute_request_metrics, little_predicted_tok_s, summarise

STAMP_CASES = [
    # (t_send, token stamps, n_out from usage)
    (1_000, [5_000_000], 1),
    (0, [10, 20, 35, 70], 4),
    (123, [1_000_123, 1_000_124, 9_000_000, 9_000_001, 30_000_000], 5),
    (0, [100, 200, 300], 6),  # two tokens per event
]


@pytest.mark.parametrize(("t_send", "stamps", "n_out"), STAMP_CASES)
def test_latency_minus_ttft_is_the_sum_of_gaps(t_send: int, stamps: list[int], n_out: int) -> None:
    record = RequestRecord(index=0, t_send_ns=t_send, token_times_ns=stamps, n_out=n_out)
    metrics = compute_request_metrics(record)
    assert metrics is not None
    assert metrics.e2el_ns - metrics.ttft_ns == sum(metrics.itl_ns)
    assert len(metrics.itl_ns) == len(stamps) - 1
    assert metrics.tokens_per_event == n_out / len(stamps)
    if n_out > 1:
        assert metrics.tpot_ms == pytest.approx(sum(metrics.itl_ns) / (n_out - 1) / 1e6)
    else:
        assert metrics.tpot_ms is None


@pytest.mark.parametrize(
    "record",
    [
        RequestRecord(index=0, t_send_ns=0, token_times_ns=[5], n_out=1, error="HTTP 500"),
        RequestRecord(index=0, t_send_ns=0, token_times_ns=[], n_out=0),
        RequestRecord(index=0, t_send_ns=None, token_times_ns=[5], n_out=1),
    ],
    ids=["errored", "no tokens", "never sent"],
)
def test_failed_requests_have_no_metrics(record: RequestRecord) -> None:
    assert compute_request_metrics(record) is None


def test_empty_sample_has_no_summary() -> None:
    assert summarise([]) is None


def test_summary_percentiles() -> None:
    summary = summarise(list(range(1, 101)))
    assert summary is not None
    assert (summary.n, summary.mean, summary.p50) == (100, 50.5, 50.5)
    assert summary.p99 == pytest.approx(99.01)


def test_littles_law_prediction() -> None:
    # 16 streams, 128 tokens, TTFT 1090 ms, TPOT 39.7 ms: 16·128 / 6.13 s ≈ 334 tok/s,
    # so the seed's 287 tok/s implies idle gaps or per-chunk timing.
    predicted = little_predicted_tok_s(
        concurrency=16, mean_n_out=128, mean_ttft_ms=1090, mean_tpot_ms=39.7
    )
    assert predicted == pytest.approx(334.0, rel=0.01)


COMPLETION_CASES = [
    # (done, n_out from usage, token events, expected tokens, error fragment or None)
    (True, 4, 4, 4, None),
    (True, None, 4, 4, None),  # usage missing: falls back to counting events
    (False, None, 3, 4, "without [DONE]"),
    (True, 3, 3, 4, "delivered 3 tokens, expected 4"),
    (True, 0, 0, None, "without a single token"),
]


@pytest.mark.parametrize(("done", "n_out", "events", "expected", "fragment"), COMPLETION_CASES)
def test_stream_completeness(
    done: bool, n_out: int | None, events: int, expected: int | None, fragment: str | None
) -> None:
    record = RequestRecord(
        index=0,
        n_out=n_out,
        token_times_ns=list(range(events)),
        expected_tokens=expected,
        n_out_source="usage" if n_out else None,
    )
    error = check_complete(record, done=done)
    assert (error is None) == (fragment is None)
    if fragment:
        assert fragment in error
    if done and n_out is None:
        assert (record.n_out, record.n_out_source) == (events, "events")


@pytest.mark.parametrize(
    ("finish_reason", "fragment"),
    [("stop", None), ("length", "cut the answer short"), (None, "cut the answer short")],
)
def test_an_answer_the_model_ended_is_not_a_failure(
    finish_reason: str | None, fragment: str | None
) -> None:
    # llama.cpp's server ignores ignore_eos: a short answer ending in "stop" is the model's EOS
    record = RequestRecord(
        index=0, n_out=3, token_times_ns=[1, 2, 3], expected_tokens=8, finish_reason=finish_reason
    )
    error = check_complete(record, done=True)
    assert (error is None) == (fragment is None), error
    if fragment:
        assert fragment in error
    assert record.ended_early is (finish_reason == "stop")


def test_a_length_finish_without_usage_counts_max_tokens() -> None:
    # llama.cpp sends no usage and may put two tokens in one event: "length" says how many
    record = RequestRecord(
        index=0, token_times_ns=[1, 2, 3], expected_tokens=4, finish_reason="length"
    )
    assert check_complete(record, done=True) is None
    assert (record.n_out, record.n_out_source) == (4, "events")
