"""What one streamed JSON payload means to a latency measurement.

Token-event rules (notes/gates.md): an event counts as a token event only when a choice carries
non-empty `text` (completions) or a delta with non-empty `content`, `reasoning_content` or
`tool_calls` (chat). Role-only chunks, usage-only chunks (`choices: []`), empty deltas and
`[DONE]` are not token events. A usage object is read wherever it appears: candle-vllm puts
it on a chunk that still carries a `choices` entry, and that chunk must not become a token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DONE = "[DONE]"
DONE_BYTES = DONE.encode()


@dataclass(frozen=True)
class StreamEvent:
    """One SSE payload, interpreted."""

    is_token: bool = False
    text: str = ""
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    response_id: str | None = None
    error: str | None = None
    done: bool = False
    finish_reason: str | None = None


def parse_payload(data: str | bytes) -> StreamEvent:
    """Interpret the `data` of one SSE event (see the module docstring for the rules)."""
    if data.strip() in (DONE, DONE_BYTES):
        return StreamEvent(done=True)
    try:
        payload = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return StreamEvent(error=f"undecodable SSE payload {data[:80]!r}: {exc}")
    if not isinstance(payload, dict):
        return StreamEvent(error=f"SSE payload is not a JSON object: {data[:80]!r}")
    if "error" in payload:
        return StreamEvent(error=f"server error in stream: {payload['error']}")
    text = "".join(_choice_text(choice) for choice in payload.get("choices") or [])
    usage = payload.get("usage") or {}
    reasons = [c.get("finish_reason") for c in payload.get("choices") or [] if isinstance(c, dict)]
    return StreamEvent(
        finish_reason=next((str(r) for r in reasons if r), None),
        is_token=bool(text),
        text=text,
        completion_tokens=usage.get("completion_tokens"),
        prompt_tokens=usage.get("prompt_tokens"),
        response_id=payload.get("id"),
    )


def _choice_text(choice: dict[str, Any]) -> str:
    """The output a choice carries; tool calls count as output through their JSON."""
    if choice.get("text"):
        return str(choice["text"])
    delta = choice.get("delta") or {}
    parts = [delta.get("content"), delta.get("reasoning_content")]
    text = "".join(part for part in parts if part)
    if delta.get("tool_calls"):
        text += json.dumps(delta["tool_calls"])
    return text
