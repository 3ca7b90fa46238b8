"""Read-outs of one forward pass over a prompt: named probes and the classifier heads.

Probes mirror what the clef-flash verification compared (the GDN write strength `beta`, the
delta-rule and gated-norm maxima); heads give clef-flash-like labelled answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from sandbox.modelserver.lm.model import TinyLM
from sandbox.modelserver.lm.weights import HEAD_LABELS


def probes(model: TinyLM, tokens: list[int]) -> dict[str, float]:
    result = model.prefill(tokens)
    gdn = result.probes
    return {
        "beta": float(gdn.beta[0]),
        "delta_rule_absmax": float(gdn.delta_rule_absmax[0]),
        "gated_norm_absmax": float(gdn.gated_norm_absmax[0]),
        "hidden_absmax": float(np.abs(result.hidden).max()),
        "logits_absmax": float(np.abs(result.logits).max()),
    }


def heads(model: TinyLM, tokens: list[int]) -> dict[str, str]:
    pooled = model.nx.r(model.prefill(tokens).hidden.mean(axis=0))
    answers = {}
    for name, labels in HEAD_LABELS.items():
        scores = model.nx.matmul(pooled, model.w.heads[name])
        answers[name] = labels[int(np.argmax(scores))]
    return answers


READOUTS: dict[str, Callable[[TinyLM, list[int]], dict[str, Any]]] = {
    "probes": probes,
    "heads": heads,
}
