"""Weights of the tiny language model, generated from a fixed seed.

Every weight is rounded to the fp16 grid, so the float32 reference and the fp16 candidate load
identical parameters (as when an fp16 checkpoint is served upcast) and differ only in how they
compute. The "direct path" table maps the previous byte to a confident prior over the next byte;
the network adds a context term on top, which is what the GDN layer (and its fault) changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sandbox.modelserver.lm.numerics import Array, to_fp16_grid

VOCAB = 257
EOS_ID = 256
D_MODEL = 64
N_HEADS = 2
HEAD_DIM = 16
CONV_WIDTH = 4
MLP_DIM = 128
QKV_DIM = 3 * N_HEADS * HEAD_DIM
KEY_BAND = slice(N_HEADS * HEAD_DIM, 2 * N_HEADS * HEAD_DIM)
"""The key channels inside the conv's [q | k | v] channel layout (what the GDN bug zeroes)."""

# Bytes the model may emit: printable ASCII, newline and EOS. Others get a floor logit so
# generated text is always valid UTF-8 and every logprob stays finite for echoed prompts.
EMITTABLE = np.array([10, *range(32, 127), EOS_ID])
FLOOR_LOGIT = -12.0
# Direct-path prior for each previous byte: a few likely successors on an fp16-exact grid
# separated by wide gaps, so the context term decides between them only some of the time.
PRIOR_LEVELS = np.array([0.5, -0.5, -1.25, -2.0])
PRIOR_REST = -6.0


@dataclass(frozen=True)
class Weights:
    """All parameters; shapes in comments use d = D_MODEL, H = N_HEADS, e = HEAD_DIM."""

    embed: Array  # [V, d]
    prior: Array  # [V, V] previous byte -> direct-path logits
    unembed: Array  # [d, V]
    context_scale: float
    gdn_norm: Array  # [d]
    gdn_qkv: Array  # [d, 3He]
    gdn_conv: Array  # [CONV_WIDTH, 3He] depthwise causal kernel
    gdn_beta: Array  # [d, H]
    gdn_decay: Array  # [d, H]
    gdn_decay_bias: Array  # [H]
    gdn_gate: Array  # [d, He]
    gdn_out_norm: Array  # [e]
    gdn_out: Array  # [He, d]
    attn_norm: Array  # [d]
    attn_qkv: Array  # [d, 3He]
    attn_out: Array  # [He, d]
    attn_slopes: Array  # [H] ALiBi recency slopes
    mlp_norm: Array  # [d]
    mlp_up: Array  # [d, MLP_DIM]
    mlp_down: Array  # [MLP_DIM, d]
    final_norm: Array  # [d]
    heads: dict[str, Array]  # head name -> [d, n_labels]


HEAD_LABELS: dict[str, tuple[str, ...]] = {
    "severity": ("low", "medium", "high", "critical"),
    "rollback": ("no rollback", "rollback"),
    "bucket": ("bucket 0", "bucket 1", "bucket 2", "bucket 3"),
}


CONTEXT_SCALE = 0.8
"""Weight of the network's context term against the prior: large enough that the GDN fault
changes most greedy outputs, small enough that fp16 rounding rarely flips an argmax."""


def generate(seed: int, *, context_scale: float = CONTEXT_SCALE) -> Weights:
    """Build the weights for `seed`; the same seed gives bit-identical weights everywhere."""
    rng = np.random.default_rng(seed)

    def dense(fan_in: int, fan_out: int, gain: float = 1.0) -> Array:
        return to_fp16_grid(rng.normal(0.0, gain / np.sqrt(fan_in), (fan_in, fan_out)))

    def ones(n: int) -> Array:
        return np.ones(n, dtype=np.float32)

    he = N_HEADS * HEAD_DIM
    return Weights(
        embed=to_fp16_grid(rng.normal(0.0, 1.0, (VOCAB, D_MODEL))),
        prior=_prior_table(rng),
        unembed=dense(D_MODEL, VOCAB),
        context_scale=context_scale,
        gdn_norm=ones(D_MODEL),
        gdn_qkv=dense(D_MODEL, QKV_DIM),
        gdn_conv=to_fp16_grid(rng.normal(0.0, 0.5, (CONV_WIDTH, QKV_DIM))),
        gdn_beta=dense(D_MODEL, N_HEADS),
        gdn_decay=dense(D_MODEL, N_HEADS, gain=0.5),
        gdn_decay_bias=to_fp16_grid(np.full(N_HEADS, -3.0)),
        gdn_gate=dense(D_MODEL, he),
        gdn_out_norm=ones(HEAD_DIM),
        gdn_out=dense(he, D_MODEL, gain=2.0),
        attn_norm=ones(D_MODEL),
        attn_qkv=dense(D_MODEL, 3 * he),
        attn_out=dense(he, D_MODEL),
        attn_slopes=np.array([0.5, 0.0625], dtype=np.float32),
        mlp_norm=ones(D_MODEL),
        mlp_up=dense(D_MODEL, MLP_DIM),
        mlp_down=dense(MLP_DIM, D_MODEL),
        final_norm=ones(D_MODEL),
        heads={name: dense(D_MODEL, len(labels)) for name, labels in HEAD_LABELS.items()},
    )


def _prior_table(rng: np.random.Generator) -> Array:
    """Per previous byte: PRIOR_LEVELS on random emittable successors, PRIOR_REST elsewhere."""
    table = np.full((VOCAB, VOCAB), FLOOR_LOGIT, dtype=np.float32)
    table[:, EMITTABLE] = PRIOR_REST
    for prev in range(VOCAB):
        successors = rng.choice(EMITTABLE[:-1], size=len(PRIOR_LEVELS), replace=False)
        table[prev, successors] = PRIOR_LEVELS
    table[:, EOS_ID] = PRIOR_REST - 1.0
    # A sentence end is where a generation may stop, so EOS competes there. (Not after a
    # newline: the chat template ends with one, and chats would often end at once.)
    table[ord("."), EOS_ID] = PRIOR_LEVELS[1]
    return to_fp16_grid(table)
