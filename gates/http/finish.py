"""Turning a stream's raw SSE payloads into a filled `RequestRecord`, after the fact.

Transports keep each payload with the arrival stamp of the read that carried it and do the
JSON work here, once the request has ended: parsing must never delay a stamp, and doing it
later keeps it off the path that stamps the other streams' tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gates.http.events import parse_payload
from gates.http.records import RequestRecord

EVENTS = "{events}"  # placeholder in a failure message: replaced by the token-event count


@dataclass
class RawStream:
    """What a transport saw of one response."""

    events: list[tuple[int, bytes]] = field(default_factory=list)  # (arrival ns, payload)
    comments: int = 0
    failure: str | None = None  # may contain EVENTS


def finish_record(record: RequestRecord, raw: RawStream) -> RequestRecord:
    """Interpret every payload, then judge completeness unless the transport failed already."""
    done = False
    for arrived_ns, data in raw.events:
        event = parse_payload(data)
        if event.is_token:
            record.token_times_ns.append(arrived_ns)
        if event.completion_tokens is not None:
            record.n_out, record.n_out_source = event.completion_tokens, "usage"
        if event.prompt_tokens is not None:
            record.n_prompt = event.prompt_tokens
        record.response_id = record.response_id or event.response_id
        record.finish_reason = event.finish_reason or record.finish_reason
        if event.error is not None and record.error is None:
            record.error = event.error
        done = done or event.done
    record.n_comments = raw.comments
    if raw.failure is not None:
        record.error = raw.failure.replace(EVENTS, str(len(record.token_times_ns)))
    elif record.error is None and record.status == 200:
        record.error = check_complete(record, done=done)
    return record


def check_complete(record: RequestRecord, *, done: bool) -> str | None:
    """Why a finished stream is not a complete answer, or None; also fills a missing N_out."""
    events = len(record.token_times_ns)
    if not done:
        return f"stream closed without [DONE] after {events} token events"
    if record.n_out is None:
        # Flagged fallback: one token per event is only a guess when usage is missing; a
        # "length" finish says the answer reached max_tokens (llama.cpp sends no usage and
        # may carry several tokens in one event).
        length = record.finish_reason == "length" and record.expected_tokens is not None
        record.n_out = record.expected_tokens if length else events
        record.n_out_source = "events"
    if events == 0:
        return "stream finished without a single token event"
    if record.ended_early:
        return None  # EOS: the model's own end, whatever ignore_eos asked
    if record.expected_tokens is not None and record.n_out != record.expected_tokens:
        return (
            f"stream delivered {record.n_out} tokens, expected {record.expected_tokens}, "
            f"finish_reason {record.finish_reason!r}: the server cut the answer short"
        )
    return None
