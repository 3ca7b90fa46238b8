"""The tiny language model: embedding, a GDN layer, an attention layer, an MLP, and a
direct-path prior plus context term for the logits.

`prefill_batch` runs prompts (padded into one batch) and returns, per prompt, the state to
continue from, the logits at every prompt position (teacher forcing) and the layer probes;
`decode` advances many sequences by one token in one batched pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sandbox.modelserver.lm.attention import KvCache, attention_decode, attention_prefill
from sandbox.modelserver.lm.gdn import GdnProbes, GdnState, gdn_forward
from sandbox.modelserver.lm.numerics import Array, Numerics
from sandbox.modelserver.lm.weights import Weights, generate
from sandbox.modelserver.precision import Precision


@dataclass
class SeqState:
    """Everything one sequence carries between decode steps."""

    gdn: GdnState
    kv: KvCache


@dataclass(frozen=True)
class PrefillResult:
    state: SeqState
    logits: Array  # [T, V], row t predicts token t + 1; [1, V] when only the last position ran
    hidden: Array  # [T, d] (or [1, d]) final-norm hidden states
    probes: GdnProbes


@dataclass(frozen=True)
class ModelSpec:
    """Enough to rebuild the same model in another process."""

    seed: int
    precision: Precision
    zero_key_band: bool
    logit_scale: float = 1.0

    def build(self) -> TinyLM:
        return TinyLM(
            generate(self.seed),
            self.precision,
            zero_key_band=self.zero_key_band,
            logit_scale=self.logit_scale,
        )


class TinyLM:
    """One model at one precision, optionally with the missing-conv-fix fault, and with its
    logits scaled (1: as trained)."""

    def __init__(
        self,
        weights: Weights,
        precision: Precision,
        *,
        zero_key_band: bool,
        logit_scale: float = 1.0,
    ) -> None:
        self.w = weights
        self.nx = Numerics(precision)
        self.zero_key_band = zero_key_band
        self.logit_scale = logit_scale

    def prefill(self, tokens: list[int]) -> PrefillResult:
        """Run a whole prompt (at least one token) for a fresh sequence, every position."""
        return self.prefill_batch([tokens], every=True)[0]

    def prefill_batch(self, prompts: list[list[int]], *, every: bool) -> list[PrefillResult]:
        """Prefill several fresh sequences in one pass, prompts padded at the end.

        With `every`, logits and hidden states come for every prompt position (teacher
        forcing, read-outs); without, only for the last one, which is all generation needs:
        the layers after the GDN then skip the other positions."""
        lengths = np.array([len(p) for p in prompts])
        ids = np.zeros((len(prompts), int(lengths.max())), dtype=np.int64)
        for i, prompt in enumerate(prompts):
            ids[i, : len(prompt)] = prompt
        valid = np.arange(ids.shape[1])[None, :] < lengths[:, None]
        states = [SeqState(gdn=GdnState.fresh(), kv=KvCache()) for _ in prompts]
        x, probes = self._gdn(self.w.embed[ids], states, valid)
        attended = attention_prefill(
            self.nx, self.w, x, lengths, [s.kv for s in states], every=every
        )
        if not every:  # keep a length-1 time axis: the prompt's last position
            last = np.arange(len(prompts)), lengths - 1
            x, ids, attended = x[last][:, None], ids[last][:, None], attended[:, None]
            lengths = np.ones_like(lengths)
        hidden = self._mlp_and_norm(self.nx.add(x, attended))
        logits = self._logits(hidden, ids)
        return [
            PrefillResult(state, logits[i, :n], hidden[i, :n], probes.row(i))
            for i, (state, n) in enumerate(zip(states, lengths, strict=True))
        ]

    def decode(self, states: list[SeqState], tokens: list[int]) -> Array:
        """Feed `tokens[i]` to `states[i]` (mutated) and return next-token logits [B, V]."""
        ids = np.asarray(tokens)
        x = self.w.embed[ids][:, None]  # [B, 1, d]
        x, _ = self._gdn(x, states, np.ones((len(tokens), 1), dtype=bool))
        x = self.nx.add(x[:, 0], attention_decode(self.nx, self.w, x[:, 0], [s.kv for s in states]))
        return self._logits(self._mlp_and_norm(x), ids)

    def _gdn(self, x: Array, states: list[SeqState], valid: Array) -> tuple[Array, GdnProbes]:
        conv = np.stack([s.gdn.conv for s in states])
        memory = np.stack([s.gdn.memory for s in states])
        out, (conv, memory), probes = gdn_forward(
            self.nx, self.w, x, (conv, memory), valid=valid, zero_key_band=self.zero_key_band
        )
        for i, state in enumerate(states):
            state.gdn = GdnState(conv=conv[i], memory=memory[i])
        return self.nx.add(x, out), probes

    def _mlp_and_norm(self, x: Array) -> Array:
        nx, w = self.nx, self.w
        up = nx.silu(nx.matmul(nx.rmsnorm(x, w.mlp_norm), w.mlp_up))
        x = nx.add(x, nx.matmul(up, w.mlp_down))
        return nx.rmsnorm(x, w.final_norm)

    def _logits(self, hidden: Array, prev_ids: Array) -> Array:
        context = self.nx.matmul(hidden, self.w.unembed)
        logits = self.w.prior[prev_ids] + self.w.context_scale * context
        return self.nx.r(logits * self.logit_scale if self.logit_scale != 1.0 else logits)
