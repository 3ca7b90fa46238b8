"""From a validated request body to what the engine runs and how the answer is rendered."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sandbox.modelserver.api.errors import ApiError
from sandbox.modelserver.api.render import ChatRenderer, CompletionRenderer, Renderer
from sandbox.modelserver.api.requests import ChatRequest, CompletionRequest
from sandbox.modelserver.engine.sequence import GenRequest
from sandbox.modelserver.lm.sampling import SamplingParams
from sandbox.modelserver.lm.tokenizer import encode, is_valid_id, render_chat

DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for /v1/completions


@dataclass(frozen=True)
class Served:
    """The model this server answers for; requests naming another, or longer, are refused."""

    model_id: str
    max_model_len: int
    known: Mapping[tuple[int, ...], tuple[int, ...]] = field(default_factory=dict)

    def check_model(self, requested: str | None) -> None:
        if requested is not None and requested != self.model_id:
            raise ApiError(
                404,
                f"The model `{requested}` does not exist: this server serves `{self.model_id}` "
                "(see GET /v1/models).",
                param="model",
            )

    def check_length(self, prompt_tokens: int, max_tokens: int) -> None:
        if prompt_tokens + max_tokens > self.max_model_len:
            raise ApiError(
                400,
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                f"prompt, {max_tokens} for the completion). Reduce the prompt or max_tokens.",
                param="max_tokens",
            )


@dataclass(frozen=True)
class Generation:
    """What the engine runs for one request, and how its answer goes back (streamed or not)."""

    request: GenRequest
    renderer: Renderer
    stream: bool
    include_usage: bool
    duration_s: float = 0.0  # simulated seconds the generation lasts at least


def plan_completion(body: CompletionRequest, served: Served, t_recv_ns: int) -> Generation:
    served.check_model(body.model)
    prompt = _prompt_ids(body.prompt)
    max_tokens = DEFAULT_COMPLETION_TOKENS if body.max_tokens is None else body.max_tokens
    served.check_length(len(prompt), max_tokens)
    k = body.logprobs or 0
    renderer = CompletionRenderer(
        echo=body.echo,
        model=served.model_id,
        prompt=prompt,
        logprobs=body.logprobs is not None,
        as_ids=body.return_tokens_as_token_ids,
    )
    wants_prompt_logprobs = body.echo and body.logprobs is not None
    request = GenRequest(
        prompt=prompt,
        max_tokens=max_tokens,
        sampling=SamplingParams(body.temperature, body.ignore_eos, k),
        seed=body.seed,
        prompt_logprobs=k if wants_prompt_logprobs else None,
        submitted_ns=t_recv_ns,
        answer=served.known.get(prompt),
    )
    return Generation(request, renderer, body.stream, body.include_usage, body.sandbox_duration_s)


def plan_chat(body: ChatRequest, served: Served, t_recv_ns: int) -> Generation:
    served.check_model(body.model)
    if body.top_logprobs and not body.logprobs:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    prompt = tuple(encode(render_chat([(m.role, m.text()) for m in body.messages])))
    limit = (
        body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    )
    # Like vLLM: without a limit, a chat may use whatever context the prompt leaves.
    max_tokens = max(served.max_model_len - len(prompt), 1) if limit is None else limit
    served.check_length(len(prompt), max_tokens)
    renderer = ChatRenderer(
        model=served.model_id,
        prompt=prompt,
        logprobs=body.logprobs,
        as_ids=body.return_tokens_as_token_ids,
    )
    request = GenRequest(
        prompt=prompt,
        max_tokens=max_tokens,
        sampling=SamplingParams(body.temperature, body.ignore_eos, body.top_logprobs or 0),
        seed=body.seed,
        prompt_logprobs=None,
        submitted_ns=t_recv_ns,
        answer=served.known.get(prompt),
    )
    return Generation(request, renderer, body.stream, body.include_usage, body.sandbox_duration_s)


def _prompt_ids(prompt: str | list[int]) -> tuple[int, ...]:
    if isinstance(prompt, str):
        return tuple(encode(prompt))
    bad = [t for t in prompt if not is_valid_id(t)]
    if bad:
        raise ApiError(
            400, f"prompt token ids {bad[:5]} are outside the vocabulary [0, 257)", param="prompt"
        )
    return tuple(prompt)
