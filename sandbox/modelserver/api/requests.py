"""Request bodies of the OpenAI-compatible endpoints, as vLLM accepts them.

Unknown fields are ignored (as vLLM does); wrong types and out-of-range values are 400s.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandbox.modelserver.api.errors import ApiError

MAX_LOGPROBS = 20


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(None, ge=0)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    seed: int | None = None
    n: Literal[1] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    return_tokens_as_token_ids: bool = False
    # A sandbox extension: the generation lasts at least this many simulated seconds (its
    # tokens spread over them; the server's delay scale maps them to real time), so a test
    # can hold a long generation open across a swap without waiting minutes.
    sandbox_duration_s: float = Field(0.0, ge=0.0)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionRequest(_Common):
    prompt: str | list[int] = Field(min_length=1)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    role: str
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=0)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)


class PromptRequest(BaseModel):
    """Body of /debug/probes and /v1/heads."""

    prompt: str = Field(min_length=1)


Body = TypeVar("Body", bound=BaseModel)


def parse(model: type[Body], body: Any) -> Body:
    """Validate a decoded JSON body; the first problem becomes an OpenAI-style 400."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise ApiError(
            400,
            f"invalid request: {where}: {first['msg']} ({exc.error_count()} error(s))",
            param=where,
        ) from exc
