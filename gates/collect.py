"""Collect what parity compares from one server: greedy completions with top-k logprobs,
teacher-forced logprobs of a reference text, numeric probes and classifier heads.

Requests go one at a time (concurrency 1): batching changes the numerics.
"""

from __future__ import annotations

from typing import Any

import httpx

from gates import api
from gates.errors import ServerError
from gates.golden_format import Completion, GoldenSettings, ModelOutputs, TokenStep

TOKEN_ID_PREFIX = "token_id:"


async def collect_outputs(
    client: httpx.AsyncClient, *, model_id: str, settings: GoldenSettings
) -> ModelOutputs:
    completions = [
        await greedy_completion(
            client,
            model_id=model_id,
            prompt_id=case.id,
            prompt=case.prompt,
            max_tokens=case.max_tokens or settings.max_tokens,
            top_k=settings.top_k,
        )
        for case in settings.prompts
    ]
    return ModelOutputs(
        completions=completions,
        reference=await teacher_forced(
            client, model_id=model_id, text=settings.reference_text, top_k=settings.top_k
        ),
        probes=await _optional(client, "/debug/probes", "probes", settings.probe_prompt),
        heads=await _optional(client, "/v1/heads", "heads", settings.probe_prompt),
    )


async def greedy_completion(
    client: httpx.AsyncClient,
    *,
    model_id: str,
    prompt_id: str,
    prompt: str,
    max_tokens: int,
    top_k: int,
) -> Completion:
    body = _logprobs_body(model_id, prompt, max_tokens=max_tokens, top_k=top_k)
    choice = _first_choice(await api.post_json(client, "/v1/completions", body))
    return Completion(
        prompt_id=prompt_id, text=str(choice.get("text", "")), steps=parse_logprobs(choice)
    )


async def teacher_forced(
    client: httpx.AsyncClient, *, model_id: str, text: str, top_k: int
) -> list[TokenStep]:
    """Prompt logprobs of `text` (echo, no generation); the first token has none."""
    body = _logprobs_body(model_id, text, max_tokens=0, top_k=top_k) | {"echo": True}
    return parse_logprobs(_first_choice(await api.post_json(client, "/v1/completions", body)))


def _logprobs_body(model_id: str, prompt: str, *, max_tokens: int, top_k: int) -> dict[str, Any]:
    return {
        "model": model_id,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 0,
        "logprobs": top_k,
        "return_tokens_as_token_ids": True,
    }


def _first_choice(payload: dict[str, Any]) -> dict[str, Any]:
    choices = payload.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise ServerError(f"completion answer has no choices: {str(payload)[:200]}")
    return choices[0]


def parse_logprobs(choice: dict[str, Any]) -> list[TokenStep]:
    """Positions of an OpenAI completions `logprobs` object; null positions are skipped."""
    logprobs = choice.get("logprobs") or {}
    tokens = logprobs.get("tokens") or []
    values = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    pieces = _pieces(str(choice.get("text", "")), logprobs.get("text_offset"), len(tokens))
    return [
        TokenStep(
            token_id=token_id(token),
            logprob=value,
            piece=piece,
            top={token_id(k): v for k, v in top.items()},
        )
        for token, value, top, piece in zip(tokens, values, tops, pieces, strict=True)
        if value is not None and top is not None
    ]


def token_id(token: str) -> int:
    """`token_id:N` -> N (vLLM's `return_tokens_as_token_ids`)."""
    if not token.startswith(TOKEN_ID_PREFIX):
        raise ServerError(
            f"expected tokens as 'token_id:N' (return_tokens_as_token_ids), got "
            f"{token!r}; the server must support that vLLM option"
        )
    return int(token.removeprefix(TOKEN_ID_PREFIX))


def _pieces(text: str, offsets: list[int] | None, n: int) -> list[str | None]:
    if not offsets or len(offsets) != n:
        return [None] * n
    ends = [*offsets[1:], len(text)]
    return [text[start:end] for start, end in zip(offsets, ends, strict=True)]


async def _optional(
    client: httpx.AsyncClient, path: str, key: str, prompt: str
) -> dict[str, Any] | None:
    """A non-standard endpoint's answer, or None when the server does not have it."""
    payload = await api.post_json_if_present(client, path, {"prompt": prompt})
    if payload is None:
        return None
    if not isinstance(payload.get(key), dict):
        raise ServerError(f"POST {path} answered {str(payload)[:200]}, expected a {key!r} object")
    return dict(payload[key])
