"""Smoke gate: the server lists the expected model and answers one request in time: a raw
completion, or a chat turn where the server has no `/v1/completions` (candle-vllm)."""

from __future__ import annotations

import asyncio
import time

from pydantic import Field

from gates.common.result import Figures, GateResult
from gates.errors import ServerError
from gates.http import api, sampling

SMOKE_PROMPT = "Hello"
SMOKE_MAX_TOKENS = 8


class SmokeFigures(Figures):
    url: str
    model_id: str
    listed_models: list[str] = Field(default_factory=list)
    completion_ms: float | None = None
    output_text: str | None = None
    endpoint: str | None = None


SmokeResult = GateResult[SmokeFigures]


def run_smoke(url: str, *, model_id: str, deadline_s: float = 30.0) -> SmokeResult:
    """Pass when `/v1/models` lists `model_id` and one completion returns text in time."""
    return asyncio.run(run_smoke_async(url, model_id=model_id, deadline_s=deadline_s))


async def run_smoke_async(url: str, *, model_id: str, deadline_s: float = 30.0) -> SmokeResult:
    figures = SmokeFigures(url=url, model_id=model_id)
    try:
        async with asyncio.timeout(deadline_s):
            failure = await _probe(url, figures, deadline_s)
    except TimeoutError:
        failure = f"{url} did not answer within the {deadline_s:g} s deadline"
    except ServerError as exc:
        failure = str(exc)
    if failure:
        return SmokeResult(
            name="smoke", passed=False, reason=failure, figures=figures, evidence=[failure]
        )
    reason = (
        f"{url} lists {model_id!r} and answered {figures.output_text!r} in "
        f"{figures.completion_ms:.0f} ms"
    )
    return SmokeResult(name="smoke", passed=True, reason=reason, figures=figures)


async def _probe(url: str, figures: SmokeFigures, timeout_s: float) -> str | None:
    """Fill `figures`; return why the server fails the smoke test, or None."""
    async with api.make_client(url, timeout_s=timeout_s) as client:
        figures.listed_models = await api.list_model_ids(client)
        if figures.model_id not in figures.listed_models:
            return (
                f"{url.rstrip('/')}/v1/models lists {figures.listed_models}, expected "
                f"{figures.model_id!r}: the server runs another model"
            )
        body = {"model": figures.model_id, "max_tokens": SMOKE_MAX_TOKENS}
        body |= sampling.neutral(extended=False)
        start = time.perf_counter()
        figures.endpoint = "/v1/completions"
        payload = await api.post_json_if_present(
            client, figures.endpoint, body | {"prompt": SMOKE_PROMPT}
        )
        if payload is None:  # no completions endpoint: a chat turn, as clients send
            figures.endpoint = "/v1/chat/completions"
            chat = {"messages": [{"role": "user", "content": SMOKE_PROMPT}]}
            payload = await api.post_json(client, figures.endpoint, body | chat)
        figures.completion_ms = (time.perf_counter() - start) * 1e3
    choice = (payload.get("choices") or [{}])[0]
    figures.output_text = str(
        choice.get("text") or (choice.get("message") or {}).get("content") or ""
    )
    if not figures.output_text:
        return (
            f"{url.rstrip('/')}{figures.endpoint} returned no text for {SMOKE_PROMPT!r}: "
            f"{str(payload)[:200]}"
        )
    return None
