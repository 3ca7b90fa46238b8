"""Smoke gate: the server lists the expected model and answers one completion in time."""

from __future__ import annotations

import asyncio
import time

from pydantic import Field

from gates import api
from gates.errors import ServerError
from gates.result import Figures, GateResult

SMOKE_PROMPT = "Hello"
SMOKE_MAX_TOKENS = 8


class SmokeFigures(Figures):
    url: str
    model_id: str
    listed_models: list[str] = Field(default_factory=list)
    completion_ms: float | None = None
    output_text: str | None = None


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
        body = {
            "model": figures.model_id,
            "prompt": SMOKE_PROMPT,
            "max_tokens": SMOKE_MAX_TOKENS,
            "temperature": 0.0,
        }
        start = time.perf_counter()
        payload = await api.post_json(client, "/v1/completions", body)
        figures.completion_ms = (time.perf_counter() - start) * 1e3
    choices = payload.get("choices") or [{}]
    figures.output_text = str(choices[0].get("text") or "")
    if not figures.output_text:
        return (
            f"{url.rstrip('/')}/v1/completions returned no text for {SMOKE_PROMPT!r}: "
            f"{str(payload)[:200]}"
        )
    return None
