"""Answers a simulated server knows: the reference answers of the task suites its profile
lists, for exactly the prompts those suites send.

The tiny LM answers nonsense; a real coder model answers its clients' coding and factual
questions. So that the task gate can tell a working candidate from a broken one in the
sandbox, a profile may name suites (`Profile.knows`): for a prompt one of their cases sends
(the chat turn rendered by the chat template, or the raw completion prompt, byte for byte),
the server answers that case's `reference`, then the end of sequence. Nothing else is
known: any other prompt, even one a character apart, gets the tiny LM's own tokens. The
known tokens are emitted like any output (one per decode step of the batch, their logprobs
the tiny LM's), so timing, streaming and max_tokens behave as for any answer.

The `forgets_answers` fault drops a deterministic share of the table (by case id), as a
candidate that no longer does part of its clients' work.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from sandbox.modelserver.lm.tokenizer import encode, render_chat
from sandbox.modelserver.lm.weights import EOS_ID

REPO = Path(__file__).resolve().parents[2]
FORGOTTEN_SHARE = 0.5  # of the known answers, under the forgets_answers fault

Known = Mapping[tuple[int, ...], tuple[int, ...]]


def load_known(suites: Iterable[str], *, forget: bool = False) -> Known:
    """Prompt tokens to answer tokens, from the suites' cases that carry a reference; paths
    are relative to the repository."""
    known: dict[tuple[int, ...], tuple[int, ...]] = {}
    for suite in suites:
        path = REPO / suite
        raw = yaml.safe_load(path.read_text())
        for case in raw.get("cases", []):
            if case.get("reference") is None or (forget and forgotten(str(case["id"]))):
                continue
            known[_prompt(case, path)] = (*encode(case["reference"]), EOS_ID)
    return known


def forgotten(case_id: str) -> bool:
    """Whether the forgets_answers fault drops this case (about FORGOTTEN_SHARE of them)."""
    digest = hashlib.sha256(case_id.encode()).digest()
    return int.from_bytes(digest[:4], "big") < FORGOTTEN_SHARE * 2**32


def _prompt(case: dict, path: Path) -> tuple[int, ...]:
    if case.get("prompt") is not None:
        return tuple(encode(case["prompt"]))
    if case.get("messages"):
        turns = [(m["role"], m["content"]) for m in case["messages"]]
        return tuple(encode(render_chat(turns)))
    raise ValueError(f"{path}: case {case.get('id')!r} has neither prompt nor messages")
