"""Pure comparisons of a candidate's outputs with the golden ones (notes/gates.md, Parity).

1. Greedy identity per prompt; at the first mismatch the divergence must be a near-tie: each
   side's token in the other's top-k (vLLM's `check_logprobs_close`) and within a small
   logprob gap in both models; comparison stops there.
2. Teacher-forced reference text: KL divergence, top-token agreement, perplexity ratio.
3. Numeric probes within a relative tolerance; 4. head answers exactly equal.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, Field

from gates.golden_format import Completion, TokenStep

PROBABILITY_FLOOR = 1e-12


class Divergence(BaseModel):
    """The first position where the candidate's greedy token differs from the golden's."""

    position: int
    golden_token: int | None = Field(description="None: the golden output ended here")
    candidate_token: int | None = Field(description="None: the candidate output ended here")
    golden_piece: str | None = None
    candidate_piece: str | None = None
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

    def describe(self, prompt_id: str) -> str:
        def side(token: int | None, piece: str | None, logprob: float | None) -> str:
            if token is None:
                return "end of output"
            lp = "" if logprob is None else f", logprob {logprob:.3f}"
            return f"token {token}" + (f" {piece!r}" if piece is not None else "") + lp

        return (
            f"prompt {prompt_id}: first divergence at position {self.position}: golden "
            f"{side(self.golden_token, self.golden_piece, self.golden_logprob)} vs candidate "
            f"{side(self.candidate_token, self.candidate_piece, self.candidate_logprob)} "
            f"({self._kind()})"
        )

    def _kind(self) -> str:
        if self.near_tie:
            return "near-tie"
        if not self.in_each_others_top_k:
            return "not in each other's top-k"
        return f"preferred by {_nats(self.golden_gap)} and {_nats(self.candidate_gap)} nats"


def _nats(gap: float | None) -> str:
    return "?" if gap is None else f"{gap:.3f}"


class PromptParity(BaseModel):
    prompt_id: str
    n_golden_tokens: int
    n_identical: int
    divergence: Divergence | None

    @property
    def passed(self) -> bool:
        return self.divergence is None or self.divergence.near_tie


def compare_completion(
    golden: Completion, candidate: Completion, *, top_k: int, max_gap: float
) -> PromptParity:
    """Greedy identity; at the first mismatch, the near-tie rule (see `divergence_at`)."""
    g_steps, c_steps = golden.steps, candidate.steps
    pairs = enumerate(zip(g_steps, c_steps, strict=False))
    shorter = min(len(g_steps), len(c_steps))
    position = next((i for i, (g, c) in pairs if g.token_id != c.token_id), shorter)
    head = {"prompt_id": golden.prompt_id, "n_golden_tokens": len(g_steps), "n_identical": position}
    if position == len(g_steps) == len(c_steps):
        return PromptParity(**head, divergence=None)
    g = g_steps[position] if position < len(g_steps) else None
    c = c_steps[position] if position < len(c_steps) else None
    return PromptParity(
        **head, divergence=divergence_at(position, g, c, top_k=top_k, max_gap=max_gap)
    )


def divergence_at(
    position: int, g: TokenStep | None, c: TokenStep | None, *, top_k: int, max_gap: float
) -> Divergence:
    """A near-tie needs each token in the other's top-k (vLLM's rule) and both models nearly
    indifferent (each preferred its own token by at most `max_gap` nats): numeric noise flips
    only near-equal choices, while on a flat distribution top-k membership alone admits any
    swap."""
    if g is None or c is None:  # one output ended early: no tie to judge
        return Divergence(
            position=position, golden_token=g and g.token_id, candidate_token=c and c.token_id
        )
    in_top = g.token_id in _top(c, top_k) and c.token_id in _top(g, top_k)
    golden_gap, candidate_gap = _gap(g, c.token_id), _gap(c, g.token_id)
    gaps = [gap for gap in (golden_gap, candidate_gap) if gap is not None]
    return Divergence(
        position=position,
        golden_token=g.token_id,
        candidate_token=c.token_id,
        golden_piece=g.piece,
        candidate_piece=c.piece,
        golden_logprob=g.logprob,
        candidate_logprob=c.logprob,
        golden_gap=golden_gap,
        candidate_gap=candidate_gap,
        in_each_others_top_k=in_top,
        near_tie=in_top and len(gaps) == 2 and max(gaps) <= max_gap,
    )


def _gap(step: TokenStep, other: int) -> float | None:
    return None if other not in step.top else step.logprob - step.top[other]


def _top(step: TokenStep, k: int) -> set[int]:
    return set(sorted(step.top, key=step.top.__getitem__, reverse=True)[:k])


class TeacherForcedFigures(BaseModel):
    n_positions: int
    kl_mean: float
    kl_p99: float
    top_token_agreement: float
    perplexity_ratio: float


def compare_teacher_forced(
    golden: list[TokenStep], candidate: list[TokenStep]
) -> TeacherForcedFigures | None:
    """KL(golden || candidate) per position over the golden's top-k plus an "other" bucket;
    None when the two tokenised the reference text differently (then they are not the same
    model, and the caller reports it).

    Only top-k logprobs are known, so a token missing from the candidate's list gets the
    smallest probability the candidate listed (an upper bound of its own), and "other" gets
    the mass left over; with k covering nearly all mass this is the full-vocabulary KL.
    """
    if not golden or [s.token_id for s in golden] != [s.token_id for s in candidate]:
        return None
    kls = np.array([position_kl(g.top, c.top) for g, c in zip(golden, candidate, strict=True)])
    agree = [
        max(g.top, key=g.top.__getitem__) == max(c.top, key=c.top.__getitem__)
        for g, c in zip(golden, candidate, strict=True)
    ]
    mean_gap = np.mean([g.logprob - c.logprob for g, c in zip(golden, candidate, strict=True)])
    return TeacherForcedFigures(
        n_positions=len(golden),
        kl_mean=float(kls.mean()),
        kl_p99=float(np.percentile(kls, 99)),
        top_token_agreement=float(np.mean(agree)),
        perplexity_ratio=float(math.exp(mean_gap)),
    )


def position_kl(golden_top: dict[int, float], candidate_top: dict[int, float]) -> float:
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
