"""Causal softmax attention with ALiBi recency bias and a per-sequence KV cache.

Decode batches sequences of different lengths by padding their caches to the longest and
masking the padding, so one set of array ops serves the whole batch.
"""

from __future__ import annotations

import numpy as np

from sandbox.modelserver.lm.numerics import Array, Numerics
from sandbox.modelserver.lm.weights import HEAD_DIM, N_HEADS, Weights

_HE = N_HEADS * HEAD_DIM


class KvCache:
    """Keys and values of one sequence, [n, H*e] each, grown by doubling."""

    def __init__(self) -> None:
        self._k = np.zeros((16, _HE), dtype=np.float32)
        self._v = np.zeros((16, _HE), dtype=np.float32)
        self.length = 0

    def extend(self, k: Array, v: Array) -> None:
        need = self.length + len(k)
        if need > len(self._k):
            grow = max(need, 2 * len(self._k))
            self._k = np.resize(self._k, (grow, _HE))
            self._v = np.resize(self._v, (grow, _HE))
        self._k[self.length : need] = k
        self._v[self.length : need] = v
        self.length = need

    def keys(self) -> Array:
        return self._k[: self.length]

    def values(self) -> Array:
        return self._v[: self.length]


def attention_prefill(
    nx: Numerics, w: Weights, x: Array, lengths: Array, caches: list[KvCache], *, every: bool
) -> Array:
    """x [B,T,d] for fresh sequences padded at the end; fills the caches. Returns the output
    at every position [B,T,d], or (`every` false) only at each prompt's last one [B,d].
    Causal masking alone keeps padding out: padded keys come after every real query."""
    q, k, v = _project(nx, w, x)
    for i, cache in enumerate(caches):
        cache.extend(k[i, : lengths[i]], v[i, : lengths[i]])
    if not every:
        return _attend_cached(nx, w, q[np.arange(len(caches)), lengths - 1], caches)
    b, t, _ = x.shape
    qh, kh, vh = (m.reshape(b, t, N_HEADS, HEAD_DIM).transpose(0, 2, 1, 3) for m in (q, k, v))
    pos = np.arange(t)
    distance = (pos[:, None] - pos[None, :]).astype(np.float32)  # [T, T]
    bias = -w.attn_slopes[:, None, None] * distance
    bias = np.where(distance < 0, -np.inf, bias)
    probs = nx.softmax(nx.r(qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(HEAD_DIM)) + bias)
    out = nx.r(probs @ vh).transpose(0, 2, 1, 3).reshape(b, t, _HE)
    return nx.matmul(out, w.attn_out)


def attention_decode(nx: Numerics, w: Weights, x: Array, caches: list[KvCache]) -> Array:
    """x [B,d], one new token per sequence -> out [B,d]; appends to each cache."""
    q, k, v = _project(nx, w, x)
    for i, cache in enumerate(caches):
        cache.extend(k[i : i + 1], v[i : i + 1])
    return _attend_cached(nx, w, q, caches)


def _project(nx: Numerics, w: Weights, x: Array) -> tuple[Array, Array, Array]:
    q, k, v = np.split(nx.matmul(nx.rmsnorm(x, w.attn_norm), w.attn_qkv), 3, axis=-1)
    return q, k, v


def _attend_cached(nx: Numerics, w: Weights, q: Array, caches: list[KvCache]) -> Array:
    """One query per sequence [B, H*e], against everything in its cache -> [B, d]."""
    lengths = np.array([c.length for c in caches])
    keys, values = _padded(caches, lengths, "keys"), _padded(caches, lengths, "values")
    b, n = len(caches), keys.shape[1]
    qh = q.reshape(b, N_HEADS, 1, HEAD_DIM)
    kh = keys.reshape(b, n, N_HEADS, HEAD_DIM).transpose(0, 2, 3, 1)
    vh = values.reshape(b, n, N_HEADS, HEAD_DIM).transpose(0, 2, 1, 3)
    distance = (lengths[:, None] - 1 - np.arange(n)[None, :]).astype(np.float32)  # [B, n]
    bias = -w.attn_slopes[None, :, None] * distance[:, None, :]
    bias = np.where(distance[:, None, :] < 0, -np.inf, bias)[:, :, None, :]
    probs = nx.softmax(nx.r(qh @ kh / np.sqrt(HEAD_DIM)) + bias)
    out = nx.r(probs @ vh).reshape(b, _HE)
    return nx.matmul(out, w.attn_out)


def _padded(caches: list[KvCache], lengths: Array, which: str) -> Array:
    out = np.zeros((len(caches), int(lengths.max()), _HE), dtype=np.float32)
    for i, cache in enumerate(caches):
        out[i, : cache.length] = getattr(cache, which)()
    return out
