"""The golden file: a reference server's outputs, versioned, with the settings that made them.

Each position keeps what the server said about its token: the id when the server gives ids
(vLLM's `return_tokens_as_token_ids`), else its text and, from chat logprobs, its bytes; and
the top-k alternatives as a list, so that alternatives sharing a text stay apart. The server's
probed capabilities travel with the outputs: parity compares what both sides offer.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from gates.common.prompts import PromptCase
from gates.errors import GoldenError
from gates.http.capabilities import Capabilities, Extension

GOLDEN_FORMAT = "handoff.golden/v2"
REFERENCE_TEXT = (
    "A handoff moves one Service from its current model server to a candidate. The candidate "
    "must answer the same questions with the same tokens, and about as fast, before any "
    "client traffic reaches it. Silent corruption keeps every response well formed."
)


class Alternative(BaseModel):
    """One of a position's top-k tokens."""

    token_id: int | None = None
    piece: str | None = None
    bytes: list[int] | None = None
    logprob: float


class TokenStep(BaseModel):
    """One position: the chosen token, its logprob and the top-k alternatives."""

    token_id: int | None = Field(default=None, description="when the server gives ids")
    piece: str | None = Field(default=None, description="the token's text, when known")
    bytes: list[int] | None = Field(default=None, description="the token's bytes (chat)")
    logprob: float | None = Field(None, description="None: not among the listed alternatives")
    top: list[Alternative] = Field(description="the server's top-k, in its order")


class Completion(BaseModel):
    prompt_id: str
    api: Literal["completions", "chat"] = "completions"
    text: str
    steps: list[TokenStep] = Field(description="empty when the server gives no logprobs")
    finish_reason: str | None = None
    prompt_tokens: int | None = Field(None, description="usage.prompt_tokens: the template's")


def default_text() -> str:
    """The built-in long text (about 2,700 tokens of plain English narrative)."""
    return resources.files("gates.parity").joinpath("long_context.txt").read_text()


class LongContextSettings(BaseModel):
    tokens: int = Field(
        2048, ge=16, description="prompt length the last probe aims at (the Service's context)"
    )
    probes: int = Field(48, ge=8, description="prompts, geometrically spaced in length")
    text: str = Field(default_factory=default_text, description="the prompts are its prefixes")
    points: list[int] = Field(
        default_factory=list, description="characters of text each probe sends; set when recorded"
    )
    capped: str | None = Field(None, description="why the probes reach fewer than `tokens`")


class ContextProbe(BaseModel):
    chars: int
    prompt_tokens: int | None = None
    step: TokenStep | None = Field(None, description="None: the answer had no logprobs")


class LongContextOutputs(BaseModel):
    probes: list[ContextProbe]
    refused: str | None = Field(None, description="the first prompt refused, and the answer")


class ModelOutputs(BaseModel):
    """Everything parity compares, as one server produced it."""

    completions: list[Completion]
    reference: list[TokenStep] | None = Field(
        None, description="teacher-forced logprobs of the reference text; None: not offered"
    )
    probes: dict[str, float] | None = Field(None, description="None: not asked for or served")
    heads: dict[str, str] | None = Field(None, description="None: not asked for or served")
    long_context: LongContextOutputs | None = Field(None, description="None: not asked for")
    not_collected: dict[str, str] = Field(
        default_factory=dict, description="what this server could not give, and why"
    )


class GoldenSettings(BaseModel):
    max_tokens: int = Field(32, description="per prompt unless the prompt sets its own")
    top_k: int = Field(8, description="logprobs recorded per position")
    reference_text: str = REFERENCE_TEXT
    probe_prompt: str = REFERENCE_TEXT
    prompts: list[PromptCase] = Field(default_factory=list, description="replayed by parity")
    extensions: list[Extension] = Field(
        default_factory=list, description="non-standard endpoints to record (probes, heads)"
    )
    sampling: dict[str, Any] = Field(
        default_factory=dict, description="the sampling fields every request sent"
    )
    long_context: LongContextSettings | None = Field(
        None, description="next-token probes deep into a long prompt; None: not recorded"
    )
    token_ids: bool = Field(
        True,
        description="ask for token ids where the server offers them; False records tokens by "
        "their text, which every engine gives (llama.cpp lists no ids): the basis a handoff "
        "to another engine compares on",
    )


class Golden(BaseModel):
    format: str = GOLDEN_FORMAT
    model_id: str
    source_url: str
    recorded_at: str
    server: Capabilities
    settings: GoldenSettings
    outputs: ModelOutputs

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # compact, and absent fields read back as None: a third of the indented size
        path.write_text(self.model_dump_json(exclude_none=True) + "\n")

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
