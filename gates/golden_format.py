"""The golden file: a reference server's outputs, versioned, with the settings that made them.

Token ids, not text, are the unit of comparison (vLLM's `return_tokens_as_token_ids`), with
each position's top-k logprobs so that a later divergence can be judged a near-tie or not.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from gates.errors import GoldenError
from gates.prompts import PromptCase

GOLDEN_FORMAT = "handoff.golden/v1"
REFERENCE_TEXT = (
    "A handoff moves one Service from its current model server to a candidate. The candidate "
    "must answer the same questions with the same tokens, and about as fast, before any "
    "client traffic reaches it. Silent corruption keeps every response well formed."
)


class TokenStep(BaseModel):
    """One position: the chosen token, its logprob and the top-k alternatives."""

    token_id: int
    logprob: float
    top: dict[int, float] = Field(description="token id -> logprob, the server's top-k")
    piece: str | None = Field(default=None, description="the token's text, when known")


class Completion(BaseModel):
    prompt_id: str
    text: str
    steps: list[TokenStep]


class ModelOutputs(BaseModel):
    """Everything parity compares, as one server produced it."""

    completions: list[Completion]
    reference: list[TokenStep] = Field(description="teacher-forced logprobs of the reference")
    probes: dict[str, float] | None = Field(description="None: the server has no probes")
    heads: dict[str, str] | None = Field(description="None: the server has no heads")


class GoldenSettings(BaseModel):
    max_tokens: int = Field(32, description="per prompt unless the prompt sets its own")
    top_k: int = Field(8, description="logprobs recorded per position")
    reference_text: str = REFERENCE_TEXT
    probe_prompt: str = REFERENCE_TEXT
    prompts: list[PromptCase] = Field(default_factory=list, description="replayed by parity")


class Golden(BaseModel):
    format: str = GOLDEN_FORMAT
    model_id: str
    source_url: str
    recorded_at: str
    settings: GoldenSettings
    outputs: ModelOutputs

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Golden:
        try:
            golden = cls.model_validate_json(path.read_text())
        except (OSError, ValidationError) as exc:
            raise GoldenError(
                f"cannot use the golden file {path}: {exc}; record one with "
                "`handoff golden record --url URL --prompts FILE --out FILE`"
            ) from exc
        if golden.format != GOLDEN_FORMAT:
            raise GoldenError(
                f"golden file {path} has format {golden.format!r}, expected {GOLDEN_FORMAT!r}; "
                "record it again with this version"
            )
        return golden
