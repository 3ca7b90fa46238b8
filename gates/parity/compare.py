"""Pure comparisons of a candidate's outputs with the golden ones (notes/gates.md, Parity).

1. Greedy identity per prompt (raw completion or chat turn); at the first mismatch the
   divergence must be a near-tie: each side's token in the other's top-k (vLLM's
   `check_logprobs_close`) and within a small logprob gap in both models; comparison stops
   there. A chat turn whose prompt is a different number of tokens was formatted by another
   chat template: that fails outright.
2. Teacher-forced reference text: KL divergence, top-token agreement, perplexity ratio.
3. Numeric probes within a relative tolerance; 4. head answers exactly equal.

Tokens are compared by the finest identity both sides give: ids, else bytes, else text
(`Basis`). Alternatives that share a key (llama.cpp lists top-k by text) are merged by adding
their probabilities, never by letting one overwrite the other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from gates.parity.golden_format import Alternative, Completion, TokenStep

PROBABILITY_FLOOR = 1e-12
Basis = Literal["token ids", "token bytes", "token text"]
Token = Alternative | TokenStep


def _with_alternatives(step: TokenStep) -> tuple[Token, ...]:
    return (step, *step.top)


def basis_of(*sides: Sequence[TokenStep]) -> Basis | None:
    """The finest token identity every position and alternative on all sides carries."""
    tokens = [t for steps in sides for s in steps for t in _with_alternatives(s)]
    if all(t.token_id is not None for t in tokens):
        return "token ids"
    if all(t.bytes is not None for t in tokens):
        return "token bytes"
    if all(t.piece is not None for t in tokens):
        return "token text"
    return None


def key(token: Token, basis: Basis) -> str:
    if basis == "token ids":
        return f"id {token.token_id}"
    if basis == "token bytes":
        return f"bytes {bytes(token.bytes or []).hex()}"
    return f"text {token.piece!r}"


def top_by_key(step: TokenStep, basis: Basis) -> dict[str, float]:
    """The top-k as key -> logprob; alternatives with one key add their probabilities."""
    merged: dict[str, float] = {}
    for alt in step.top:
        k = key(alt, basis)
        merged[k] = float(np.logaddexp(merged[k], alt.logprob)) if k in merged else alt.logprob
    return merged


def _label(step: TokenStep | None) -> str | None:
    if step is None:
        return None
    if step.token_id is not None:
        return f"token {step.token_id}" + (f" {step.piece!r}" if step.piece is not None else "")
    return repr(step.piece) if step.piece is not None else bytes(step.bytes or []).hex()


class Divergence(BaseModel):
    """The first position where the candidate's greedy token differs from the golden's."""

    position: int
    golden_token: str | None = Field(description="None: the golden output ended here")
    candidate_token: str | None = Field(description="None: the candidate output ended here")
    golden_logprob: float | None = None
    candidate_logprob: float | None = None
    golden_gap: float | None = Field(
        None, description="nats the golden preferred its token by; None: other not listed"
    )
    candidate_gap: float | None = Field(
        None, description="nats the candidate preferred its token by; None: other not listed"
    )
    in_each_others_top_k: bool = False
    near_tie: bool = False
    unit: Literal["token", "character"] = "token"

    def describe(self, prompt_id: str) -> str:
        def side(token: str | None, logprob: float | None) -> str:
            if token is None:
                return "end of output"
            return token + ("" if logprob is None else f", logprob {logprob:.3f}")

        return (
            f"prompt {prompt_id}: first divergence at {self._where()}: golden "
            f"{side(self.golden_token, self.golden_logprob)} vs candidate "
            f"{side(self.candidate_token, self.candidate_logprob)} ({self._kind()})"
        )

    def _where(self) -> str:
        return (
            f"character {self.position}"
            if self.unit == "character"
            else f"position {self.position}"
        )

    def _kind(self) -> str:
        if self.unit == "character":
            return "no logprobs to judge a near-tie"
        ended = self.golden_token is None or self.candidate_token is None
        if self.near_tie:
            return "near-tie: the other nearly ended there too" if ended else "near-tie"
        if ended:
            gap = self.golden_gap if self.golden_gap is not None else self.candidate_gap
            return "one output ended" + (
                f"; the other preferred going on by {_nats(gap)} nats" if gap is not None else ""
            )
        if not self.in_each_others_top_k:
            return "not in each other's top-k"
        return f"preferred by {_nats(self.golden_gap)} and {_nats(self.candidate_gap)} nats"


def _nats(gap: float | None) -> str:
    return "?" if gap is None else f"{gap:.3f}"


class PromptParity(BaseModel):
    prompt_id: str
    api: Literal["completions", "chat"] = "completions"
    basis: Basis | Literal["text"] = Field(description="what was compared")
    n_golden_tokens: int
    n_identical: int
    divergence: Divergence | None
    golden_prompt_tokens: int | None = None
    candidate_prompt_tokens: int | None = None
    kl: list[float | None] = Field(
        default_factory=list,
        description="KL(golden || candidate) over the top-k per position, up to the divergence",
    )
    top_overlap: list[float | None] = Field(
        default_factory=list,
        description="share of the top-k both list, per position, up to the divergence",
    )

    @property
    def template_differs(self) -> bool:
        """Both counted the prompt, differently: another chat template or tokeniser."""
        g, c = self.golden_prompt_tokens, self.candidate_prompt_tokens
        return g is not None and c is not None and g != c

    @property
    def passed(self) -> bool:
        tie = self.divergence is None or self.divergence.near_tie
        return tie and not self.template_differs

    def describe_template(self) -> str:
        what = "chat template" if self.api == "chat" else "tokeniser"
        return (
            f"prompt {self.prompt_id}: the golden's prompt was {self.golden_prompt_tokens} "
            f"tokens, the candidate's {self.candidate_prompt_tokens}: another {what}"
        )


def compare_completion(
    golden: Completion, candidate: Completion, *, top_k: int, max_gap: float | None
) -> PromptParity:
    """Greedy identity; at the first mismatch, the near-tie rule (see `divergence_at`).
    Without logprobs on a side, the texts are compared character by character."""
    g_steps, c_steps = golden.steps, candidate.steps
    basis = basis_of(g_steps, c_steps) if g_steps and c_steps else None
    head: dict[str, Any] = {
        "prompt_id": golden.prompt_id,
        "api": golden.api,
        "golden_prompt_tokens": golden.prompt_tokens,
        "candidate_prompt_tokens": candidate.prompt_tokens,
    }
    if basis is None:
        return _compare_text(golden.text, candidate.text, head)
    keys_g = [key(s, basis) for s in g_steps]
    keys_c = [key(s, basis) for s in c_steps]
    shorter = min(len(keys_g), len(keys_c))
    position = next((i for i in range(shorter) if keys_g[i] != keys_c[i]), shorter)
    head |= {"basis": basis, "n_golden_tokens": len(g_steps), "n_identical": position}
    # Both sides saw the same context up to and including the first divergence, no further.
    shared = zip(g_steps[: position + 1], c_steps[: position + 1], strict=False)
    tops = [(top_by_key(g, basis), top_by_key(c, basis)) for g, c in shared]
    head |= dict(zip(("kl", "top_overlap"), along(tops), strict=True))
    if position == len(g_steps) == len(c_steps):
        return PromptParity(**head, divergence=None)
    g = g_steps[position] if position < len(g_steps) else None
    c = c_steps[position] if position < len(c_steps) else None
    if g is None or c is None:
        ended_by = (golden if g is None else candidate).finish_reason
        divergence = early_end(position, g, c, basis, ended_by, top_k=top_k, max_gap=max_gap)
    else:
        divergence = divergence_at(position, g, c, basis, top_k=top_k, max_gap=max_gap)
    return PromptParity(**head, divergence=divergence)


def along(
    tops: Iterable[tuple[dict[str, float], dict[str, float]]],
) -> tuple[list[float | None], list[float | None]]:
    """Per position (golden's and candidate's top-k): KL and the share of the top-k both
    list; None where a side listed no alternatives."""
    kls: list[float | None] = []
    overlaps: list[float | None] = []
    for g_top, c_top in tops:
        known = bool(g_top and c_top)
        kls.append(position_kl(g_top, c_top) if known else None)
        overlaps.append(
            len(g_top.keys() & c_top.keys()) / max(len(g_top), len(c_top)) if known else None
        )
    return kls, overlaps


def _compare_text(golden: str, candidate: str, head: dict) -> PromptParity:
    position = next(
        (i for i, (a, b) in enumerate(zip(golden, candidate, strict=False)) if a != b),
        min(len(golden), len(candidate)),
    )
    divergence = None
    if golden != candidate:
        divergence = Divergence(
            position=position,
            golden_token=repr(golden[position : position + 12]) if position < len(golden) else None,
            candidate_token=(
                repr(candidate[position : position + 12]) if position < len(candidate) else None
            ),
            unit="character",
        )
    return PromptParity(
        **head, basis="text", n_golden_tokens=0, n_identical=0, divergence=divergence
    )


def divergence_at(
    position: int,
    g: TokenStep,
    c: TokenStep,
    basis: Basis,
    *,
    top_k: int,
    max_gap: float | None,
) -> Divergence:
    """A near-tie needs each token in the other's top-k (vLLM's rule) and both models nearly
    indifferent (each preferred its own token by at most `max_gap` nats): numeric noise flips
    only near-equal choices, while on a flat distribution top-k membership alone admits any
    swap. `max_gap` None is vLLM's rule alone (what it uses to accept quantized models)."""
    g_key, c_key = key(g, basis), key(c, basis)
    g_top, c_top = top_by_key(g, basis), top_by_key(c, basis)
    in_top = g_key in _best(c_top, top_k) and c_key in _best(g_top, top_k)
    golden_gap, candidate_gap = _gap(g_top, g_key, c_key), _gap(c_top, c_key, g_key)
    gaps = [gap for gap in (golden_gap, candidate_gap) if gap is not None]
    return Divergence(
        position=position,
        golden_token=_label(g),
        candidate_token=_label(c),
        golden_logprob=g.logprob,
        candidate_logprob=c.logprob,
        golden_gap=golden_gap,
        candidate_gap=candidate_gap,
        in_each_others_top_k=in_top,
        near_tie=in_top and (max_gap is None or (len(gaps) == 2 and max(gaps) <= max_gap)),
    )


def early_end(
    position: int,
    g: TokenStep | None,
    c: TokenStep | None,
    basis: Basis,
    ended_by: str | None,
    *,
    top_k: int,
    max_gap: float | None,
) -> Divergence:
    """One side ended where the other went on. A server lists no step for the end token it
    chose (llama.cpp), so the tie is judged on the side that went on: it is a near-tie when
    the ending side chose to end (finish reason "stop", not "length") and the other listed
    an end among its top-k (an alternative that renders as nothing, `_renders_nothing`)
    other than its own token, and preferred its own token by at most `max_gap` nats."""
    going = g if g is not None else c
    divergence = Divergence(position=position, golden_token=_label(g), candidate_token=_label(c))
    if going is None or ended_by != "stop":
        return divergence
    top = top_by_key(going, basis)
    own = key(going, basis)
    ends = {key(a, basis) for a in going.top if _renders_nothing(a)} - {own}
    end = max(ends & _best(top, top_k), key=top.__getitem__, default=None)
    if end is None or own not in top:
        return divergence
    gap = top[own] - top[end]
    near = max_gap is None or gap <= max_gap
    field = "golden_gap" if g is not None else "candidate_gap"
    return divergence.model_copy(
        update={field: gap, "in_each_others_top_k": True, "near_tie": near}
    )


def _renders_nothing(token: Token) -> bool:
    """An end token: no bytes where the server gives bytes, else an empty text (which a
    partial UTF-8 token shares: the caller never takes the token a side chose for one)."""
    return token.bytes == [] if token.bytes is not None else token.piece == ""


def _gap(top: dict[str, float], own: str, other: str) -> float | None:
    if own not in top or other not in top:
        return None
    return top[own] - top[other]


def _best(top: dict[str, float], k: int) -> set[str]:
    return set(sorted(top, key=top.__getitem__, reverse=True)[:k])


class TeacherForcedFigures(BaseModel):
    n_positions: int
    basis: Basis
    kl_mean: float
    kl_p99: float
    kl_max: float
    top_token_agreement: float
    perplexity_ratio: float | None
    perplexity_positions: int = Field(
        0, description="positions the ratio averages: those where the golden gave a figure"
    )
    perplexity_bounded: int = Field(
        0,
        description="of those, positions where the candidate ranked the text's token below "
        "its listed top-k: counted at its k-th listed logprob, an upper bound of its own "
        "(so the ratio is, if anything, kind to the candidate)",
    )
    log_gaps: list[float] = Field(
        default_factory=list,
        description="per position the ratio averages: the golden's logprob of the text's "
        "token less the candidate's (the perplexity check's interval is drawn from these)",
    )
    kl_along: list[float | None] = Field(default_factory=list, description="per position")
    top_overlap_along: list[float | None] = Field(default_factory=list, description="per position")


def compare_teacher_forced(
    golden: list[TokenStep], candidate: list[TokenStep], *, top_k: int | None = None
) -> TeacherForcedFigures | None:
    """KL(golden || candidate) per position over the golden's top-k plus an "other" bucket;
    None when the two tokenised the reference text differently (then they are not the same
    model, and the caller reports it).

    Only top-k logprobs are known, so a token missing from the candidate's list gets the
    smallest probability the candidate listed (an upper bound of its own), and "other" gets
    the mass left over; with k covering nearly all mass this is the full-vocabulary KL.
    """
    basis = basis_of(golden, candidate)
    if not golden or basis is None:
        return None
    if [key(s, basis) for s in golden] != [key(s, basis) for s in candidate]:
        return None
    tops = [
        (top_by_key(g, basis), top_by_key(c, basis)) for g, c in zip(golden, candidate, strict=True)
    ]
    kl_along, overlap_along = along(tops)
    kls = np.array([k for k in kl_along if k is not None])
    agree = [same_argmax(g, c) for g, c in tops]
    scored = [
        (_reference_logprob(g, g_top, basis, top_k), _reference_logprob(c, c_top, basis, top_k))
        for g, c, (g_top, c_top) in zip(golden, candidate, tops, strict=True)
    ]
    # Where the golden gave no figure (it ranked the token below its own top-k) there is
    # nothing to compare with: two unrelated tails would make a ratio of noise.
    both = [(g, c) for g, c in scored if g is not None and not g[1] and c is not None]
    gaps = [g[0] - c[0] for g, c in both]
    return TeacherForcedFigures(
        n_positions=len(golden),
        basis=basis,
        kl_mean=float(kls.mean()),
        kl_p99=float(np.percentile(kls, 99)),
        kl_max=float(kls.max()),
        top_token_agreement=float(np.mean(agree)),
        perplexity_ratio=float(math.exp(np.mean(gaps))) if gaps else None,
        perplexity_positions=len(both),
        perplexity_bounded=sum(1 for _, c in both if c[1]),
        log_gaps=gaps,
        kl_along=kl_along,
        top_overlap_along=overlap_along,
    )


def _reference_logprob(
    step: TokenStep, top: dict[str, float], basis: Basis, top_k: int | None
) -> tuple[float, bool] | None:
    """The logprob a side gave the reference text's token, and whether it is only a bound:
    a server that reads it off its top-k (llama-cpp-python's echo) has none where the
    token ranked lower, exactly the positions a worse candidate adds; dropping them would
    flatter it, so the candidate's count at its k-th listed logprob. None: the side
    listed nothing."""
    if step.logprob is not None:
        return step.logprob, False
    listed = top.get(key(step, basis))
    if listed is not None:
        return listed, False
    if not top:
        return None
    # The k-th listed, not the least: llama-cpp-python lists one entry beyond the k asked
    # for (the previous token, under this position's distribution), often far below them.
    ranked = sorted(top.values(), reverse=True)
    return ranked[min(top_k or len(ranked), len(ranked)) - 1], True


def same_argmax(golden_top: dict[str, float], candidate_top: dict[str, float]) -> bool:
    """Both sides' most likely token is the same (False when a side listed none)."""
    if not (golden_top and candidate_top):
        return False
    return max(golden_top, key=golden_top.__getitem__) == max(
        candidate_top, key=candidate_top.__getitem__
    )


def position_kl(golden_top: dict[str, float], candidate_top: dict[str, float]) -> float:
    p = {t: math.exp(lp) for t, lp in golden_top.items()}
    listed = {t: math.exp(lp) for t, lp in candidate_top.items()}
    unlisted = min(min(listed.values()), max(1.0 - sum(listed.values()), PROBABILITY_FLOOR))
    q = {t: listed.get(t, unlisted) for t in p}
    p_other = max(1.0 - sum(p.values()), 0.0)
    q_other = max(1.0 - sum(q.values()), PROBABILITY_FLOOR)
    kl = sum(pt * math.log(pt / max(q[t], PROBABILITY_FLOOR)) for t, pt in p.items() if pt > 0)
    if p_other > 0:
        kl += p_other * math.log(p_other / q_other)
    return max(kl, 0.0)


class ProbeCheck(BaseModel):
    name: str
    golden: float
    candidate: float | None
    relative_error: float | None
    passed: bool


def compare_probes(
    golden: dict[str, float], candidate: dict[str, float], *, rel_tol: float
) -> list[ProbeCheck]:
    checks = []
    for name, expected in sorted(golden.items()):
        observed = candidate.get(name)
        error = None if observed is None else abs(observed - expected) / max(abs(expected), 1e-30)
        checks.append(
            ProbeCheck(
                name=name,
                golden=expected,
                candidate=observed,
                relative_error=error,
                passed=error is not None and error <= rel_tol,
            )
        )
    return checks


class HeadCheck(BaseModel):
    name: str
    golden: str
    candidate: str | None

    @property
    def passed(self) -> bool:
        return self.golden == self.candidate


def compare_heads(golden: dict[str, str], candidate: dict[str, str]) -> list[HeadCheck]:
    return [
        HeadCheck(name=n, golden=g, candidate=candidate.get(n)) for n, g in sorted(golden.items())
    ]
