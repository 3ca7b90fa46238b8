"""Record a golden file from a reference server (`handoff golden record`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from gates.common.prompts import load_prompts
from gates.errors import GoldenError
from gates.http import api
from gates.http.capabilities import discover
from gates.parity import long_context
from gates.parity.collect import collect_outputs
from gates.parity.golden_format import Golden, GoldenSettings

RECORD_TIMEOUT_S = 600.0  # teacher forcing a long text on a loaded CPU server takes minutes


def record_golden(
    url: str,
    prompts_file: Path,
    *,
    reference_file: Path | None = None,
    model_id: str | None = None,
    settings: GoldenSettings | None = None,
) -> Golden:
    """Greedy outputs, teacher-forced logprobs and, when `settings.extensions` asks for
    them, probes and heads of the server at `url`, with the capabilities it was found to have.

    `reference_file` holds the text scored with teacher forcing (and fed to the probes and
    heads); without it, a built-in passage is used.
    """
    update: dict[str, object] = {"prompts": load_prompts(prompts_file)}
    if reference_file is not None:
        text = read_reference(reference_file)
        update |= {"reference_text": text, "probe_prompt": text}
    settings = (settings or GoldenSettings()).model_copy(update=update)
    return asyncio.run(record_golden_async(url, model_id=model_id, settings=settings))


def read_reference(path: Path) -> str:
    try:
        text = path.read_text()
    except OSError as exc:
        raise GoldenError(f"cannot read the reference text {path}: {exc}") from exc
    if not text.strip():
        raise GoldenError(f"the reference text {path} is empty; teacher forcing needs text")
    return text


async def record_golden_async(
    url: str, *, model_id: str | None, settings: GoldenSettings
) -> Golden:
    """As `record_golden` with the prompts already in `settings`, inside a running loop."""
    async with api.make_client(url, timeout_s=RECORD_TIMEOUT_S) as client:
        resolved = await api.resolve_model_id(client, model_id)
        caps = await discover(client, resolved, extensions=tuple(settings.extensions))
        if not settings.token_ids:
            caps = caps.model_copy(update={"token_ids": False})
        settings = settings.model_copy(update={"sampling": caps.greedy_sampling()})
        if settings.long_context is not None and caps.completions_logprobs:
            planned = await long_context.plan(
                client,
                model_id=resolved,
                settings=settings.long_context,
                top_k=settings.top_k,
                caps=caps,
            )
            settings = settings.model_copy(update={"long_context": planned})
        outputs = await collect_outputs(client, model_id=resolved, settings=settings, caps=caps)
    if not outputs.completions and outputs.reference is None:
        raise GoldenError(
            f"{url} gave nothing parity can compare: {outputs.not_collected}; a golden file "
            "needs completions or chat answers from the reference server"
        )
    return Golden(
        model_id=resolved,
        source_url=url,
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        server=caps,
        settings=settings,
        outputs=outputs,
    )
