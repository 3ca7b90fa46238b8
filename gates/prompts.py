"""The parity prompt set: JSON Lines, one `{"id", "prompt", "max_tokens"?}` object a line."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from gates.errors import GoldenError


class PromptCase(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    prompt: str
    max_tokens: int | None = None


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
                f"{path}:{number}: expected a JSON object with a string 'prompt', got "
                f"{line[:80]!r} ({exc})"
            ) from exc
    if not cases:
        raise GoldenError(f"the prompt set {path} holds no prompts")
    return cases
