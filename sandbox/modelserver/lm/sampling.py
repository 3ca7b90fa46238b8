"""Turning logits into tokens and logprobs (computed in float64, as servers upcast logits)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sandbox.modelserver.lm.numerics import Array
from sandbox.modelserver.lm.weights import EOS_ID


@dataclass(frozen=True)
class TokenOut:
    """One token with its logprob and the top alternatives (empty when not requested)."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class SamplingParams:
    temperature: float
    ignore_eos: bool
    top_logprobs: int


def log_softmax(logits: Array) -> Array:
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    out: Array = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))  # numpy types it Any
    return out


def choose(logits: Array, params: SamplingParams, rng: np.random.Generator) -> TokenOut:
    """Greedy at temperature 0, otherwise sampled from softmax(logits / T) with `rng`."""
    return choose_from(log_softmax(logits), params, rng)


def choose_from(logprobs: Array, params: SamplingParams, rng: np.random.Generator) -> TokenOut:
    """`choose` for one row of precomputed logprobs (batches normalise all rows at once)."""
    scores = logprobs
    if params.ignore_eos:
        scores = logprobs.copy()
        scores[EOS_ID] = -np.inf
    if params.temperature == 0.0:
        token = int(np.argmax(scores))
    else:
        p = np.exp(log_softmax(scores / params.temperature))
        token = int(rng.choice(len(p), p=p))
    return TokenOut(token, float(logprobs[token]), top_k(logprobs, params.top_logprobs))


def score(logits: Array, token_id: int, k: int) -> TokenOut:
    """Teacher forcing: the logprob of a given token and the top-k at that position."""
    logprobs = log_softmax(logits)
    return TokenOut(token_id, float(logprobs[token_id]), top_k(logprobs, k))


def top_k(logprobs: Array, k: int) -> tuple[tuple[int, float], ...]:
    if k <= 0:
        return ()
    # Stable sort: equal logprobs rank by token id, so the order never depends on the run.
    order = np.argsort(-logprobs, kind="stable")[:k]
    return tuple((int(i), float(logprobs[i])) for i in order)
