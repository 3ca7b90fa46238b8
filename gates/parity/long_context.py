"""Long-context parity: the next-token distribution at prompts cut from one long text at
growing lengths, up to the context the Service is used with.

Teacher forcing scores a few hundred tokens, and its mean hides where the KL sits. A change
that hurts with position (rotary base or scaling, a sliding window, context shift, KV
eviction) is nearly invisible there, and it hurts exactly the long prompts. Each probe here
is the text up to a word boundary, answered with one greedy token and its top-k; probes go
shortest first, so a server that reuses a cached prompt prefix (llama.cpp, vLLM's prefix
caching) evaluates the text about once. The figures are per position bucket, with a trend
check: KL that grows with position fails even when its mean is small.

The golden side plans the cut points (`plan`): as long as `tokens`, or as long as the server
takes when its context is shorter (noted). The candidate is asked the same prompts; one it
refuses that the golden's server answered is a finding (its context is shorter).
"""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
from pydantic import BaseModel, Field

from gates.errors import ServerError
from gates.http import api
from gates.http.capabilities import Capabilities
from gates.parity.compare import Basis, basis_of, position_kl, same_argmax, top_by_key
from gates.parity.golden_format import (
    ContextProbe,
    LongContextOutputs,
    LongContextSettings,
)
from gates.parity.logprobs import parse_completion_logprobs

CHARS_PER_TOKEN_GUESS = 4  # English under a BPE tokenizer: about 4.3; the plan measures
PLAN_TRIES = 8
FIRST_CHARS = 64  # the shortest probe: about 15 tokens
N_BUCKETS = 4  # also the least probes a golden takes: two a bucket
TREND_PERMUTATIONS = 2000  # of the positions, for the trend's p-value (seeded: repeatable)
REFUSED = (400, 413, 422)  # how servers refuse a prompt longer than their context


def word_cut(text: str, chars: int) -> int:
    """The largest prefix length <= `chars` that ends just before whitespace (or the text's
    end): the next token then starts a word on every tokenizer alike."""
    if chars >= len(text):
        return len(text.rstrip())
    cut = chars
    while cut > 0 and not text[cut].isspace():
        cut -= 1
    while cut > 0 and text[cut - 1].isspace():
        cut -= 1
    return cut


async def plan(
    client: httpx.AsyncClient,
    *,
    model_id: str,
    settings: LongContextSettings,
    top_k: int,
    caps: Capabilities,
) -> LongContextSettings:
    """`settings` with the cut points: the longest prefix within `tokens` that the server
    takes (measured by its own prompt_tokens), split into `probes` word-bounded prompts."""
    text, target = settings.text, settings.tokens
    chars = word_cut(text, target * CHARS_PER_TOKEN_GUESS)
    best, capped = 0, None
    for _ in range(PLAN_TRIES):
        status, payload = await _ask(client, model_id, text[:chars], top_k, caps)
        if status in REFUSED:
            capped = f"the server refused {chars} characters ({_said(payload)})"
            chars = word_cut(text, chars * 3 // 4)
            continue
        n = _prompt_tokens(payload)
        if n is None:
            best = chars
            break
        if n <= target:
            best = max(best, chars)
            grow = word_cut(text, chars * target // max(n, 1))
            if grow <= chars or n >= target * 0.95 or capped:
                break
            chars = grow
        else:
            chars = word_cut(text, chars * target // n)
    if not best:
        raise ServerError(
            f"{client.base_url} took no prefix of the long-context text ({capped or 'no answer'}); "
            "record the golden with a smaller --context-tokens or --context-tokens 0"
        )
    if best == len(text.rstrip()) and not capped:
        capped = "the text ends there: give a longer --context-text"
    # Geometric spacing: a position-dependent change grows from nothing at the first tokens
    # and levels off within a few hundred, so the short prompts are where it is seen rising.
    shortest = min(FIRST_CHARS, best)
    ratios = np.geomspace(shortest, best, settings.probes)
    points = sorted({word_cut(text, round(float(r))) for r in ratios} - {0})
    return settings.model_copy(update={"points": points, "capped": capped})


async def collect(
    client: httpx.AsyncClient,
    *,
    model_id: str,
    settings: LongContextSettings,
    top_k: int,
    caps: Capabilities,
) -> LongContextOutputs:
    """The answer to each planned prompt, shortest first; stops at the first refusal (the
    longer ones would be refused too)."""
    probes: list[ContextProbe] = []
    for chars in settings.points:
        status, payload = await _ask(client, model_id, settings.text[:chars], top_k, caps)
        if status in REFUSED:
            refused = f"a prompt of {chars} characters: HTTP {status}: {_said(payload)}"
            return LongContextOutputs(probes=probes, refused=refused)
        probes.append(_probe(chars, payload))
    return LongContextOutputs(probes=probes)


async def _ask(
    client: httpx.AsyncClient, model_id: str, prompt: str, top_k: int, caps: Capabilities
) -> tuple[int, dict[str, Any]]:
    """One greedy token with its top-k: (200, answer) or (a refusal's status, its body)."""
    body: dict[str, Any] = {"model": model_id, "prompt": prompt, "max_tokens": 1}
    body |= caps.greedy_sampling() | {"logprobs": top_k}
    if caps.token_ids:
        body["return_tokens_as_token_ids"] = True
    status, payload, _ = await api.probe(client, "POST", "/v1/completions", body)
    if status == 200 and payload is not None:
        return status, payload
    if status in REFUSED:
        return status, payload or {}
    raise ServerError(
        f"POST {client.base_url}/v1/completions with a {len(prompt)}-character prompt answered "
        f"HTTP {status}, expected 200 or a refusal (400): {_said(payload)}"
    )


def _probe(chars: int, payload: dict[str, Any]) -> ContextProbe:
    choice = api.first_choice(payload, "long-context answer")
    steps = parse_completion_logprobs(choice.get("logprobs") or {}, str(choice.get("text") or ""))
    return ContextProbe(
        chars=chars, prompt_tokens=_prompt_tokens(payload), step=steps[0] if steps else None
    )


def _prompt_tokens(payload: dict[str, Any]) -> int | None:
    value = (payload.get("usage") or {}).get("prompt_tokens")
    return value if isinstance(value, int) else None


def _said(payload: dict[str, Any] | None) -> str:
    if not payload:
        return "no JSON body"
    error = payload.get("error")
    message = error.get("message") if isinstance(error, dict) else error or payload.get("detail")
    return str(message or payload)[:300]


class ContextBucket(BaseModel):
    first_token: int | None
    last_token: int | None
    n: int
    kl_mean: float
    top_token_agreement: float


class LongContextFigures(BaseModel):
    n_probes: int
    reached_tokens: int | None = Field(description="the golden's longest prompt, in its tokens")
    basis: Basis | None = None
    positions: list[int | None] = Field(default_factory=list, description="prompt tokens")
    kl_along: list[float] = Field(default_factory=list)
    buckets: list[ContextBucket] = Field(default_factory=list, description="shortest first")
    trend_rho: float | None = Field(None, description="Spearman's rho of KL against position")
    trend_p: float | None = Field(None, description="one-sided permutation p-value of rho")
    refused: str | None = None
    capped: str | None = None

    @property
    def rise(self) -> float | None:
        """The longest quarter's mean KL less the shortest's."""
        if len(self.buckets) < 2:
            return None
        return self.buckets[-1].kl_mean - self.buckets[0].kl_mean


def compare(
    golden: LongContextOutputs, candidate: LongContextOutputs, settings: LongContextSettings
) -> LongContextFigures:
    """KL(golden || candidate) of the next token at each prompt both answered, by bucket of
    position, and whether it grows with position."""
    pairs = [
        (g, c)
        for g, c in zip(golden.probes, candidate.probes, strict=False)
        if g.step is not None and c.step is not None and g.chars == c.chars
    ]
    reached = golden.probes[-1].prompt_tokens if golden.probes else None
    head: dict[str, Any] = {
        "n_probes": len(golden.probes),
        "reached_tokens": reached,
        "refused": candidate.refused if len(candidate.probes) < len(golden.probes) else None,
        "capped": settings.capped,
    }
    basis = basis_of([g.step for g, _ in pairs], [c.step for _, c in pairs])  # type: ignore[misc]
    if basis is None or len(pairs) < N_BUCKETS:
        return LongContextFigures(**head)
    kls, agree = [], []
    for g, c in pairs:
        assert g.step is not None and c.step is not None
        g_top, c_top = top_by_key(g.step, basis), top_by_key(c.step, basis)
        kls.append(position_kl(g_top, c_top) if g_top and c_top else 0.0)
        agree.append(same_argmax(g_top, c_top))
    positions = [g.prompt_tokens for g, _ in pairs]
    order = [g.prompt_tokens if g.prompt_tokens is not None else g.chars for g, _ in pairs]
    rho, p = trend(order, kls)
    return LongContextFigures(
        **head,
        basis=basis,
        positions=positions,
        kl_along=kls,
        buckets=_buckets(positions, kls, agree),
        trend_rho=rho,
        trend_p=p,
    )


def _buckets(
    positions: list[int | None], kls: list[float], agree: list[bool]
) -> list[ContextBucket]:
    out = []
    for part in np.array_split(np.arange(len(kls)), N_BUCKETS):
        idx = [int(i) for i in part]
        out.append(
            ContextBucket(
                first_token=positions[idx[0]],
                last_token=positions[idx[-1]],
                n=len(idx),
                kl_mean=float(np.mean([kls[i] for i in idx])),
                top_token_agreement=float(np.mean([agree[i] for i in idx])),
            )
        )
    return out


def trend(positions: list[int], values: list[float]) -> tuple[float, float]:
    """Spearman's rho of `values` against `positions` and its one-sided p-value (rho this
    large or larger among seeded permutations of the values)."""
    x = _ranks(np.asarray(positions, dtype=float))
    y = _ranks(np.asarray(values, dtype=float))
    rho = _pearson(x, y)
    rng = np.random.default_rng(0)
    shuffled = np.array([_pearson(x, rng.permutation(y)) for _ in range(TREND_PERMUTATIONS)])
    p = (1 + int(np.sum(shuffled >= rho - 1e-12))) / (1 + TREND_PERMUTATIONS)
    return rho, p


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share theirs)."""
    order = values.argsort(kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype=float)
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    dx, dy = x - x.mean(), y - y.mean()
    denom = float(np.sqrt((dx * dx).sum() * (dy * dy).sum()))
    return float((dx * dy).sum() / denom) if denom else 0.0
