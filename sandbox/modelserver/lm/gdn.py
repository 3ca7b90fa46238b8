"""The linear-attention layer: a gated delta rule (GDN) fed by a causal conv over [q | k | v].

Shapes carry a batch and a time axis, [B, T, ...]: prefill runs prompts padded at the end
to a common length (`valid` marks real positions), decode runs many sequences one token each
(T=1). The recurrence itself is sequential in time, so it loops over T; padded positions
leave the state untouched.

`zero_key_band` reproduces the image without the GDN conv fix: the key channels coming out of
the conv are zeroed, the delta rule never writes its state, and the layer returns zeros while
everything downstream stays well formed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sandbox.modelserver.lm.numerics import Array, Numerics
from sandbox.modelserver.lm.weights import CONV_WIDTH, HEAD_DIM, KEY_BAND, N_HEADS, QKV_DIM, Weights


@dataclass
class GdnState:
    """Per-sequence recurrent state: the conv's last inputs and the delta-rule matrix."""

    conv: Array  # [CONV_WIDTH - 1, QKV_DIM]
    memory: Array  # [H, e, e]

    @classmethod
    def fresh(cls) -> GdnState:
        return cls(
            conv=np.zeros((CONV_WIDTH - 1, QKV_DIM), dtype=np.float32),
            memory=np.zeros((N_HEADS, HEAD_DIM, HEAD_DIM), dtype=np.float32),
        )


@dataclass(frozen=True)
class GdnProbes:
    """Named scalars of one forward pass (summed or maxed over time, heads and channels)."""

    beta: Array  # [B] sum of the write strengths
    delta_rule_absmax: Array  # [B]
    gated_norm_absmax: Array  # [B]

    def row(self, i: int) -> GdnProbes:
        """The probes of sequence `i` alone (arrays of length 1)."""
        pick = slice(i, i + 1)
        return GdnProbes(
            self.beta[pick], self.delta_rule_absmax[pick], self.gated_norm_absmax[pick]
        )


def gdn_forward(
    nx: Numerics,
    w: Weights,
    x: Array,
    state: tuple[Array, Array],
    *,
    valid: Array,
    zero_key_band: bool,
) -> tuple[Array, tuple[Array, Array], GdnProbes]:
    """x [B,T,d], state (conv [B,W-1,C], memory [B,H,e,e]), valid [B,T] bool
    -> (out [B,T,d], new state, probes)."""
    b, t, _ = x.shape
    conv, memory = state
    xn = nx.rmsnorm(x, w.gdn_norm)
    mixed, conv = _causal_conv(nx, w, nx.matmul(xn, w.gdn_qkv), conv, valid.sum(axis=1))
    if zero_key_band:
        mixed[..., KEY_BAND] = 0.0
    q, k, v = (m.reshape(b, t, N_HEADS, HEAD_DIM) for m in np.split(mixed, 3, axis=-1))
    q = nx.r(nx.l2norm(q) / np.sqrt(HEAD_DIM))
    k = nx.l2norm(k)
    beta = nx.sigmoid(nx.matmul(xn, w.gdn_beta))  # [B,T,H]
    decay = nx.r(np.exp(-nx.softplus(nx.matmul(xn, w.gdn_decay) + w.gdn_decay_bias)))
    o, memory = _delta_rule(nx, (q, k, v), beta, decay, memory, valid)
    gate = nx.silu(nx.matmul(xn, w.gdn_gate)).reshape(b, t, N_HEADS, HEAD_DIM)
    gated = nx.mul(nx.rmsnorm(o, w.gdn_out_norm), gate)
    out = nx.matmul(gated.reshape(b, t, N_HEADS * HEAD_DIM), w.gdn_out)
    return out, (conv, memory), _probes(beta, o, gated, valid)


def _probes(beta: Array, o: Array, gated: Array, valid: Array) -> GdnProbes:
    """Per sequence, over its real positions only."""
    real = valid[:, :, None, None]
    return GdnProbes(
        beta=np.where(valid[:, :, None], beta, 0.0).sum(axis=(1, 2), dtype=np.float64),
        delta_rule_absmax=np.where(real, np.abs(o), 0.0).max(axis=(1, 2, 3)),
        gated_norm_absmax=np.where(real, np.abs(gated), 0.0).max(axis=(1, 2, 3)),
    )


def _causal_conv(
    nx: Numerics, w: Weights, qkv: Array, conv: Array, lengths: Array
) -> tuple[Array, Array]:
    """Depthwise causal conv over time, then SiLU; returns the output and each sequence's
    new conv tail (its last W-1 real inputs)."""
    t = qkv.shape[1]
    full = np.concatenate([conv, qkv], axis=1)  # [B, W-1+T, C]
    acc = sum(full[:, j : j + t] * w.gdn_conv[j] for j in range(CONV_WIDTH))
    tails = np.stack([full[i, n : n + CONV_WIDTH - 1] for i, n in enumerate(lengths)])
    return nx.silu(nx.r(acc)), tails


def _delta_rule(
    nx: Numerics,
    qkv: tuple[Array, Array, Array],
    beta: Array,
    decay: Array,
    memory: Array,
    valid: Array,
) -> tuple[Array, Array]:
    """S_t = a_t S_{t-1} (I - b_t k k^T) + b_t v k^T, o_t = S_t q_t; memory is [B,H,e,e]."""
    q, k, v = qkv
    outs = []
    for step in range(q.shape[1]):
        kt, vt, qt = k[:, step, ..., None], v[:, step, ..., None], q[:, step, ..., None]
        decayed = nx.r(decay[:, step, :, None, None] * memory)
        error = nx.r(vt - decayed @ kt)  # what the memory mispredicts for this key
        written = nx.r(decayed + beta[:, step, :, None, None] * (error @ kt.swapaxes(-1, -2)))
        memory = np.where(valid[:, step, None, None, None], written, memory)
        outs.append(nx.r(memory @ qt)[..., 0])
    return np.stack(outs, axis=1), memory
