"""The parity prompt set: JSON Lines, one object a line.

`{"id", "prompt", "max_tokens"?, "stop"?}` is a raw completion (`/v1/completions`);
`{"id", "messages": [{"role", "content"}, ...], "max_tokens"?, "stop"?}` is a chat turn
(`/v1/chat/completions`, through the server's chat template), as clients send it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from gates.errors import GoldenError


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class Turn(BaseModel):
    """One request a case sends: a raw completion or a chat turn, never both."""

    id: str
    prompt: str | None = None
    messages: list[Message] | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None

    @model_validator(mode="after")
    def _one_input(self) -> Turn:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give either 'prompt' (a completion) or 'messages' (a chat turn)")
        if self.messages == []:
            raise ValueError("'messages' is empty")
        return self

    @property
    def api(self) -> Literal["completions", "chat"]:
        return "chat" if self.messages is not None else "completions"


class PromptCase(Turn):
    model_config = ConfigDict(extra="ignore")


def load_prompts(path: Path) -> list[PromptCase]:
    """Read a prompt set; lines without an id get `line-N`; blank lines are skipped."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise GoldenError(f"cannot read the prompt set {path}: {exc}") from exc
    cases = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            raw.setdefault("id", f"line-{number}")
            raw["id"] = str(raw["id"])
            cases.append(PromptCase.model_validate(raw))
        except (json.JSONDecodeError, ValidationError, AttributeError) as exc:
            raise GoldenError(
                f"{path}:{number}: expected a JSON object with 'prompt' or 'messages', got "
                f"{line[:80]!r} ({exc})"
            ) from exc
    if not cases:
        raise GoldenError(f"the prompt set {path} holds no prompts")
    return cases
