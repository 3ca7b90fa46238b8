"""Record a golden file from a reference server (`handoff golden record`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from gates import api
from gates.collect import collect_outputs
from gates.golden_format import Golden, GoldenSettings
from gates.prompts import load_prompts

RECORD_TIMEOUT_S = 120.0


def record_golden(
    url: str,
    prompts_file: Path,
    *,
    model_id: str | None = None,
    settings: GoldenSettings | None = None,
) -> Golden:
    """Greedy outputs, teacher-forced logprobs, probes and heads of the server at `url`."""
    base = settings or GoldenSettings()
    settings = base.model_copy(update={"prompts": load_prompts(prompts_file)})
    return asyncio.run(record_golden_async(url, model_id=model_id, settings=settings))


async def record_golden_async(
    url: str, *, model_id: str | None, settings: GoldenSettings
) -> Golden:
    """As `record_golden` with the prompts already in `settings`, inside a running loop."""
    async with api.make_client(url, timeout_s=RECORD_TIMEOUT_S) as client:
        resolved = await api.resolve_model_id(client, model_id)
        outputs = await collect_outputs(client, model_id=resolved, settings=settings)
    return Golden(
        model_id=resolved,
        source_url=url,
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        settings=settings,
        outputs=outputs,
    )
