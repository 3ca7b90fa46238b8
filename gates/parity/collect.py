"""Collect what parity compares from one server: greedy answers with top-k logprobs (raw
completions and chat turns), teacher-forced logprobs of a reference text, and, when asked for,
the probes and heads extensions. Only what the server offers (gates.http.capabilities) is asked for;
the rest is listed in `not_collected` with the reason.

Requests go one at a time (concurrency 1): batching changes the numerics. Every request states
greedy sampling in full (gates.http.sampling).
"""

from __future__ import annotations

from typing import Any

import httpx

from gates.common.prompts import PromptCase
from gates.errors import ServerError
from gates.http import api
from gates.http.capabilities import Capabilities
from gates.parity import long_context
from gates.parity.golden_format import Completion, GoldenSettings, ModelOutputs, TokenStep
from gates.parity.logprobs import chat_step, parse_completion_logprobs, pieces, step

JsonBody = dict[str, Any]
EXTENSION_KEYS = {"probes": ("/debug/probes", "probes"), "heads": ("/v1/heads", "heads")}


async def collect_outputs(
    client: httpx.AsyncClient, *, model_id: str, settings: GoldenSettings, caps: Capabilities
) -> ModelOutputs:
    missing: dict[str, str] = {}
    completions = []
    url = str(client.base_url).rstrip("/")
    who = caps.server_name(url)
    for case in settings.prompts:
        why = _unavailable(case, caps, url, who)
        if why:
            missing[f"prompt {case.id}"] = why
            continue
        max_tokens = case.max_tokens or settings.max_tokens
        collect = _chat if case.api == "chat" else _completion
        body = _common(model_id, case, max_tokens, caps)
        completions.append(await collect(client, case, body, settings.top_k, caps))
    reference = None
    if caps.echo_logprobs:
        reference = await teacher_forced(
            client, model_id=model_id, text=settings.reference_text, top_k=settings.top_k, caps=caps
        )
    elif not caps.completions:
        missing["teacher_forced"] = (
            f"teacher forcing needs prompt logprobs (echo) from POST {url}"
            f"/v1/completions, which {who} does not have (it serves chat only): leave "
            "teacher_forced out of tolerances.require and record the golden through chat"
        )
    else:
        missing["teacher_forced"] = "the server returns no prompt logprobs (echo with logprobs)"
    long = None
    if settings.long_context is not None and caps.completions_logprobs:
        long = await long_context.collect(
            client,
            model_id=model_id,
            settings=settings.long_context,
            top_k=settings.top_k,
            caps=caps,
        )
    elif settings.long_context is not None:
        missing["long_context"] = (
            f"long-context probes need completions with logprobs (POST {url}/v1/completions), "
            f"which {who} does not give: leave long_context out of tolerances.require"
        )
    extras: dict[str, Any] = {}
    for name in settings.extensions:
        if name in caps.extensions:
            extras[name] = await _extension(client, name, settings.probe_prompt)
        else:
            missing[name] = (
                f"{who} has no {EXTENSION_KEYS[name][0]} (an extension of the simulated "
                "servers): record the golden without --extensions, or leave it out of "
                "tolerances.require"
            )
    return ModelOutputs(
        completions=completions,
        reference=reference,
        probes=extras.get("probes"),
        heads=extras.get("heads"),
        long_context=long,
        not_collected=missing,
    )


def _unavailable(case: PromptCase, caps: Capabilities, url: str, who: str) -> str | None:
    if case.api == "chat" and not caps.chat:
        return f"POST {url}/v1/chat/completions: {who} has no chat endpoint"
    if case.api == "completions" and not caps.completions:
        return (
            f"POST {url}/v1/completions: {who} has no raw completions"
            + (" (it serves chat only)" if caps.chat else "")
            + ": record the golden from chat turns and leave completions out of "
            "tolerances.require"
        )
    return None


def _common(model_id: str, case: PromptCase, max_tokens: int, caps: Capabilities) -> dict:
    body: dict[str, Any] = {"model": model_id, "max_tokens": max_tokens} | caps.greedy_sampling()
    if case.stop:
        body["stop"] = case.stop
    if caps.token_ids:
        body["return_tokens_as_token_ids"] = True
    return body


async def _completion(
    client: httpx.AsyncClient, case: PromptCase, common: JsonBody, top_k: int, caps: Capabilities
) -> Completion:
    body = common | {"prompt": case.prompt}
    if caps.completions_logprobs:
        body["logprobs"] = top_k
    payload = await api.post_json(client, "/v1/completions", body)
    choice = api.first_choice(payload, "completion answer")
    return Completion(
        prompt_id=case.id,
        api="completions",
        text=str(choice.get("text") or ""),
        steps=parse_completion_logprobs(
            choice.get("logprobs") or {}, str(choice.get("text") or "")
        ),
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=_prompt_tokens(payload),
    )


async def _chat(
    client: httpx.AsyncClient, case: PromptCase, common: JsonBody, top_k: int, caps: Capabilities
) -> Completion:
    messages = [m.model_dump() for m in case.messages or []]
    body = common | {"messages": messages}
    if caps.chat_logprobs:
        body |= {"logprobs": True, "top_logprobs": top_k}
    payload = await api.post_json(client, "/v1/chat/completions", body)
    choice = api.first_choice(payload, "completion answer")
    content = (choice.get("logprobs") or {}).get("content") or []
    return Completion(
        prompt_id=case.id,
        api="chat",
        text=str((choice.get("message") or {}).get("content") or ""),
        steps=[chat_step(entry) for entry in content if isinstance(entry, dict)],
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=_prompt_tokens(payload),
    )


async def teacher_forced(
    client: httpx.AsyncClient, *, model_id: str, text: str, top_k: int, caps: Capabilities
) -> list[TokenStep]:
    """Logprobs of each token of `text` given the ones before it, from the echoed prompt.

    One generated token (a server may read `max_tokens: 0` as "until the context is full");
    only prompt positions are kept. Servers that shift echoed logprobs by one are realigned:
    the distribution that predicted token i is then the one listed at i - 1.
    """
    body = {"model": model_id, "prompt": text, "max_tokens": 1, "echo": True, "logprobs": top_k}
    body |= caps.greedy_sampling()
    if caps.token_ids:
        body["return_tokens_as_token_ids"] = True
    payload = await api.post_json(client, "/v1/completions", body)
    logprobs = api.first_choice(payload, "completion answer").get("logprobs") or {}
    tokens = list(logprobs.get("tokens") or [])
    values = list(logprobs.get("token_logprobs") or [])
    tops = list(logprobs.get("top_logprobs") or [])
    offsets = list(logprobs.get("text_offset") or [])
    n = sum(1 for o in offsets if o < len(text)) if offsets else _prompt_tokens(payload)
    if not n or len(tokens) < n:
        raise ServerError(f"echo of the reference text returned {len(tokens)} tokens: {payload}")
    texts = pieces(text, offsets[:n], n, tokens, as_ids=caps.token_ids)
    steps = []
    for i in range(1, n):
        if caps.echo_alignment == "predicts-next":
            top, value = tops[i - 1], None
            if top is not None:
                value = top.get(tokens[i])
        else:
            top, value = tops[i], values[i]
        if top is None:
            continue  # nothing predicted this position (the first token)
        steps.append(step(tokens[i], value, top, texts[i]))
    return steps


def _prompt_tokens(payload: dict[str, Any]) -> int | None:
    usage = payload.get("usage") or {}
    value = usage.get("prompt_tokens")
    return int(value) if isinstance(value, int) else None


async def _extension(client: httpx.AsyncClient, name: str, prompt: str) -> dict[str, Any]:
    """A non-standard endpoint's answer (the server was probed to have it)."""
    path, key = EXTENSION_KEYS[name]
    payload = await api.post_json(client, path, {"prompt": prompt})
    if not isinstance(payload.get(key), dict):
        raise ServerError(f"POST {path} answered {str(payload)[:200]}, expected a {key!r} object")
    return dict(payload[key])
