"""Discover what an OpenAI-compatible server offers, once, before a gate relies on it.

Servers implement different parts of the API, with different conventions (notes/real-engines.md):
vLLM returns token ids on request and starts `text_offset` at the completion; llama.cpp's server
returns token text, counts the prompt in `text_offset` and shifts echoed prompt logprobs by one;
candle-vllm has no `/v1/completions`. Each probe is one small request; what it finds is recorded
in the golden file and the parity report, so a reader sees what could be compared.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

from gates.errors import ServerError
from gates.http import api, sampling

TOKEN_ID_PREFIX = "token_id:"
# A text whose every next token a language model predicts with confidence: the echoed prompt
# logprobs are likelier under their true alignment than shifted by one.
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"
PROBE_TOP_K = 5
MISSING_LOGPROB = -30.0  # a token absent from a listed top-k: very unlikely
TOKENIZE_PATHS = ("/tokenize", "/extras/tokenize")
EXTENSION_PATHS = {"probes": "/debug/probes", "heads": "/v1/heads"}

Alignment = Literal["predicts-this", "predicts-next"]
OffsetBase = Literal["completion", "prompt"]
Extension = Literal["probes", "heads"]


class Capabilities(BaseModel):
    """What one server offers, as probed."""

    model_ids: list[str] = Field(description="from /v1/models, in its order")
    identity: dict[str, str] = Field(
        default_factory=dict, description="what the server says it is: owned_by, headers, version"
    )
    completions: bool = Field(description="POST /v1/completions exists")
    completions_logprobs: bool = False
    chat: bool = Field(description="POST /v1/chat/completions exists")
    chat_logprobs: bool = Field(False, description="chat logprobs with top_logprobs")
    chat_bytes: bool = Field(False, description="chat logprobs carry each token's bytes")
    token_ids: bool = Field(False, description="tokens as ids (vLLM return_tokens_as_token_ids)")
    echo_logprobs: bool = Field(False, description="prompt logprobs through echo")
    echo_alignment: Alignment | None = Field(
        None,
        description="predicts-this: entry i is the distribution that predicted token i (vLLM); "
        "predicts-next: entry i is the one after token i (llama-cpp-python without a BOS)",
    )
    text_offset_base: OffsetBase | None = Field(
        None, description="where completions text_offset counts from"
    )
    extended_sampling: bool = Field(
        False, description="accepts top_k, min_p and repetition penalties besides OpenAI's"
    )
    tokenize_path: str | None = None
    health_path: str | None = None
    extensions: list[Extension] = Field(default_factory=list, description="probed on request")

    def server_name(self, url: str) -> str:
        """`url` with what the server says it is, for messages: `http://… (candle-vllm)`."""
        owner = self.identity.get("owned_by")
        return f"{str(url).rstrip('/')} ({owner})" if owner else str(url).rstrip("/")

    def greedy_sampling(self) -> dict[str, Any]:
        """The greedy sampling fields sent to this server."""
        return sampling.neutral(extended=self.extended_sampling)

    def chat_only(self) -> bool:
        """Chat turns and no raw completions (candle-vllm)."""
        return self.chat and not self.completions

    def summary(self) -> str:
        offered = [
            name
            for name, on in (
                ("completions", self.completions),
                ("completions logprobs", self.completions_logprobs),
                ("chat", self.chat),
                ("chat logprobs", self.chat_logprobs),
                ("token ids", self.token_ids),
                ("echo prompt logprobs", self.echo_logprobs),
                (f"tokenize ({self.tokenize_path})", self.tokenize_path is not None),
                *((f"extension {e}", True) for e in self.extensions),
            )
            if on
        ]
        who = ", ".join(f"{k} {v}" for k, v in sorted(self.identity.items())) or "unknown"
        return f"offers {', '.join(offered) or 'nothing usable'}; identity: {who}"


async def discover(
    client: httpx.AsyncClient,
    model_id: str,
    *,
    extensions: tuple[Extension, ...] = (),
    logprobs: bool = True,
) -> Capabilities:
    """Probe the server behind `client` for `model_id` (a few short requests, in order).

    `logprobs` False probes only the endpoints and sampling fields (what load needs): logprobs
    are costly on some servers (llama-cpp-python sorts the whole vocabulary per position)."""
    status, models, headers = await api.probe(client, "GET", "/v1/models")
    if status != 200 or models is None:
        raise ServerError(
            f"GET {client.base_url.join('/v1/models')} answered HTTP {status}, expected the "
            "model list: is this an OpenAI-compatible server?"
        )
    caps = Capabilities(
        model_ids=[str(m.get("id")) for m in models.get("data") or []],
        identity=_identity(models, headers),
        completions=False,
        chat=False,
    )
    caps.extended_sampling = await _completions(client, model_id, caps, logprobs=logprobs)
    if not caps.completions:
        caps.extended_sampling = await _chat(client, model_id, caps, logprobs=logprobs)
    else:
        await _chat(client, model_id, caps, logprobs=logprobs)
    caps.tokenize_path = await _first_present(client, TOKENIZE_PATHS, model_id)
    caps.health_path = "/health" if (await api.probe(client, "GET", "/health"))[0] == 200 else None
    version = await api.probe(client, "GET", "/version")
    if version[0] == 200 and version[1] and "version" in version[1]:
        caps.identity["version"] = str(version[1]["version"])
    for name in extensions:
        status, _, _ = await api.probe(client, "POST", EXTENSION_PATHS[name], {"prompt": "1"})
        if status == 200:
            caps.extensions.append(name)
    return caps


def _identity(models: dict[str, Any], headers: httpx.Headers) -> dict[str, str]:
    found = {}
    data = models.get("data") or [{}]
    if isinstance(data[0], dict) and data[0].get("owned_by"):
        found["owned_by"] = str(data[0]["owned_by"])
    if headers.get("server"):
        found["server_header"] = headers["server"]
    return found


async def _post_greedy(
    client: httpx.AsyncClient, path: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any] | None, bool]:
    """POST with every neutral sampling field; if the server refuses the extensions, again
    with OpenAI's alone. Returns status, answer and whether the extensions were accepted."""
    status, payload, _ = await api.probe(
        client, "POST", path, body | sampling.neutral(extended=True)
    )
    if status in (400, 422):
        status, payload, _ = await api.probe(
            client, "POST", path, body | sampling.neutral(extended=False)
        )
        return status, payload, False
    return status, payload, status == 200


async def _completions(
    client: httpx.AsyncClient, model_id: str, caps: Capabilities, *, logprobs: bool
) -> bool:
    body: dict[str, Any] = {"model": model_id, "prompt": COUNTING, "max_tokens": 1}
    if logprobs:
        body |= {"logprobs": PROBE_TOP_K, "return_tokens_as_token_ids": True}
    status, plain, extended = await _post_greedy(client, "/v1/completions", body)
    if status in (404, 405):
        return False
    caps.completions = status == 200
    if not logprobs:
        return extended
    found = _choice(plain).get("logprobs") or {}
    tokens = found.get("tokens") or []
    caps.completions_logprobs = bool(tokens) and bool(found.get("top_logprobs"))
    caps.token_ids = bool(tokens) and all(str(t).startswith(TOKEN_ID_PREFIX) for t in tokens)
    offsets = found.get("text_offset") or []
    if offsets:
        caps.text_offset_base = "prompt" if offsets[0] >= len(COUNTING) else "completion"
    status, echoed, _ = await api.probe(
        client,
        "POST",
        "/v1/completions",
        body | {"echo": True} | sampling.neutral(extended=extended),
    )
    if status == 200:
        caps.echo_alignment = echo_alignment(_choice(echoed).get("logprobs") or {}, COUNTING)
        caps.echo_logprobs = caps.echo_alignment is not None
    return extended


async def _chat(
    client: httpx.AsyncClient, model_id: str, caps: Capabilities, *, logprobs: bool
) -> bool:
    body: dict[str, Any] = {
        "model": model_id,
        "messages": [{"role": "user", "content": "Count: 1, 2, 3"}],
        "max_tokens": 2,
    }
    if logprobs:
        body |= {"logprobs": True, "top_logprobs": PROBE_TOP_K, "return_tokens_as_token_ids": True}
    status, answer, extended = await _post_greedy(client, "/v1/chat/completions", body)
    caps.chat = status == 200
    content = (_choice(answer).get("logprobs") or {}).get("content") or []
    caps.chat_logprobs = bool(content) and all(
        isinstance(entry, dict) and entry.get("top_logprobs") for entry in content
    )
    caps.chat_bytes = caps.chat_logprobs and all(
        isinstance(entry.get("bytes"), list) for entry in content
    )
    return extended


def _choice(payload: dict[str, Any] | None) -> dict[str, Any]:
    choices = (payload or {}).get("choices") or [{}]
    return choices[0] if isinstance(choices[0], dict) else {}


def echo_alignment(logprobs: dict[str, Any], prompt: str) -> Alignment | None:
    """Which alignment makes the echoed (predictable) prompt likelier; None without entries."""
    tokens = logprobs.get("tokens") or []
    values = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or []
    offsets = logprobs.get("text_offset") or []
    n = sum(1 for offset in offsets if offset < len(prompt)) if offsets else len(tokens) - 1
    if n < 4 or len(values) < n or len(tops) < n:
        return None
    same = [v for v in values[1:n] if v is not None]
    shifted = [
        (tops[i - 1] or {}).get(tokens[i], MISSING_LOGPROB) for i in range(2, n) if tops[i - 1]
    ]
    if not same or not shifted:
        return None
    same_mean = math.fsum(same) / len(same)
    shifted_mean = math.fsum(shifted) / len(shifted)
    return "predicts-this" if same_mean >= shifted_mean else "predicts-next"


async def _first_present(
    client: httpx.AsyncClient, paths: tuple[str, ...], model_id: str
) -> str | None:
    for path in paths:
        body = {"model": model_id, "prompt": "a b", "input": "a b"}
        status, payload, _ = await api.probe(client, "POST", path, body)
        if status == 200 and payload and isinstance(payload.get("tokens"), list):
            return path
    return None
