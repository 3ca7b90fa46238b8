"""Token-event rules: only chunks carrying output text are token events; role-only, empty,
usage-only and candle-style usage chunks are not, and usage is read wherever it appears."""

from __future__ import annotations

import json

import pytest

from gates.http.events import StreamEvent, parse_payload


def chat(delta: dict, usage: dict | None = None) -> str:
    return json.dumps({"id": "c1", "choices": [{"index": 0, "delta": delta}], "usage": usage})


USAGE = {"prompt_tokens": 5, "completion_tokens": 9}
CASES = [
    ("completions text", json.dumps({"id": "x", "choices": [{"text": "hi"}]}), True, "hi", None),
    ("completions empty text", json.dumps({"choices": [{"text": ""}]}), False, "", None),
    ("chat role only", chat({"role": "assistant"}), False, "", None),
    ("chat role and empty content", chat({"role": "assistant", "content": ""}), False, "", None),
    ("chat content", chat({"content": "ok"}), True, "ok", None),
    ("chat reasoning", chat({"reasoning_content": "hmm"}), True, "hmm", None),
    ("chat tool call", chat({"tool_calls": [{"id": "t"}]}), True, '[{"id": "t"}]', None),
    ("usage only, vLLM style", json.dumps({"choices": [], "usage": USAGE}), False, "", 9),
    ("usage on a chunk with a choice, candle style", chat({}, USAGE), False, "", 9),
    ("usage and the last token together", chat({"content": "z"}, USAGE), True, "z", 9),
]


@pytest.mark.parametrize(("name", "payload", "is_token", "text", "n_out"), CASES)
def test_token_event_rules(
    name: str, payload: str, is_token: bool, text: str, n_out: int | None
) -> None:
    event = parse_payload(payload)
    assert (event.is_token, event.text, event.completion_tokens) == (is_token, text, n_out), name
    assert event.error is None


def test_done_ends_the_stream() -> None:
    assert parse_payload("[DONE]") == StreamEvent(done=True)


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ("{not json", "undecodable"),
        ("[1, 2]", "not a JSON object"),
        ('{"error": {"message": "boom"}}', "boom"),
    ],
)
def test_bad_payloads_become_errors_not_tokens(payload: str, fragment: str) -> None:
    event = parse_payload(payload)
    assert not event.is_token
    assert event.error is not None and fragment in event.error
