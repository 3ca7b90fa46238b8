"""Parity gate: does the candidate answer as the golden reference did?

Probes the candidate's capabilities, replays the golden file's prompts (raw completions and
chat turns) and reference text against it at concurrency 1, and compares what both sides
have (gates.parity.compare). What one side could not give is listed in the report; when the
spec requires it, the verdict is "no verdict", never a pass. A candidate that zeroes a channel
band stays well formed: only these comparisons catch it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gates.common.blocking import blocking
from gates.common.result import GateResult
from gates.common.settings import ParityCheck, ParityTolerances
from gates.errors import ServerError
from gates.http import api
from gates.http.capabilities import Capabilities, discover
from gates.parity import long_context
from gates.parity.collect import collect_outputs
from gates.parity.compare import (
    basis_of,
    compare_completion,
    compare_heads,
    compare_probes,
    compare_teacher_forced,
)
from gates.parity.golden_format import Golden, ModelOutputs
from gates.parity.perplexity import check_perplexity
from gates.parity.report import ParityFigures

ParityResult = GateResult[ParityFigures]
CONTEXT_REACHED = 0.9  # word-bounded prompts land a little short of the tokens asked for
REQUEST_TIMEOUT_S = 600.0  # as RECORD_TIMEOUT_S: one echo of the reference text


async def run_parity_async(
    url: str,
    golden: Golden,
    tolerances: ParityTolerances | None = None,
    *,
    model_id: str | None = None,
) -> ParityResult:
    """Compare the server at `url` with `golden`; model id defaults to the golden's."""
    model_id = model_id or golden.model_id
    try:
        candidate = await collect_candidate(url, golden, model_id=model_id)
    except ServerError as exc:
        figures = ParityFigures(
            golden_model=golden.model_id, candidate_model=model_id, candidate_url=url
        )
        return ParityResult.unanswered("parity", exc, figures)
    return judge(golden, candidate, tolerances or ParityTolerances())


run_parity = blocking(run_parity_async)


@dataclass(frozen=True)
class Candidate:
    """What one candidate server gave, before any tolerance is applied."""

    url: str
    model_id: str
    server: Capabilities
    outputs: ModelOutputs


async def collect_candidate(url: str, golden: Golden, *, model_id: str) -> Candidate:
    """Probe the server at `url` and replay the golden's requests (ServerError if it fails)."""
    async with api.make_client(url, timeout_s=REQUEST_TIMEOUT_S) as client:
        caps = await discover(client, model_id, extensions=tuple(golden.settings.extensions))
        if not golden.server.token_ids:
            # The golden's tokens are text (its server gave no ids, or it was recorded by
            # text for another engine): ask for text, the basis both sides then share.
            caps = caps.model_copy(update={"token_ids": False})
        outputs = await collect_outputs(
            client, model_id=model_id, settings=golden.settings, caps=caps
        )
    return Candidate(url, model_id, caps, outputs)


def judge(golden: Golden, candidate: Candidate, tolerances: ParityTolerances) -> ParityResult:
    """The verdict on collected outputs under `tolerances` (pure: judge again, no requests)."""
    figures = compare_outputs(
        golden,
        candidate.outputs,
        tolerances,
        candidate_model=candidate.model_id,
        candidate_url=candidate.url,
    )
    figures.golden_server = golden.server
    figures.candidate_server = candidate.server
    return _result(figures, tolerances, golden)


def compare_outputs(
    golden: Golden,
    candidate: ModelOutputs,
    tolerances: ParityTolerances,
    *,
    candidate_model: str,
    candidate_url: str,
) -> ParityFigures:
    """Every comparison both sides allow, and what could not be compared (pure)."""
    reference = golden.outputs
    by_id = {c.prompt_id: c for c in candidate.completions}
    not_compared: dict[str, str] = {}
    prompts = []
    for g in reference.completions:
        c = by_id.get(g.prompt_id)
        if c is None:
            why = candidate.not_collected.get(f"prompt {g.prompt_id}", "not answered")
            not_compared[f"prompt {g.prompt_id} ({g.api})"] = f"candidate: {why}"
            continue
        prompts.append(
            compare_completion(g, c, top_k=tolerances.top_k, max_gap=tolerances.near_tie_max_gap)
        )
    for name, why in reference.not_collected.items():
        not_compared[name] = f"golden: {why}"
    teacher_forced, both_scored = None, False
    if reference.reference is None:
        pass
    elif candidate.reference is None:
        why = candidate.not_collected.get("teacher_forced", "not collected")
        not_compared["teacher_forced"] = f"candidate: {why}"
    elif basis_of(reference.reference, candidate.reference) is None:
        # Not "another model": the two sides name tokens differently (ids against text).
        not_compared["teacher_forced"] = (
            "no common token identity: the golden names tokens by id, the candidate only "
            "by text (another engine); record the golden by text for this handoff "
            "(`handoff golden record --token-text`)"
        )
    else:
        both_scored = True
        teacher_forced = compare_teacher_forced(
            reference.reference, candidate.reference, top_k=golden.settings.top_k
        )
    probes, heads = [], []
    if reference.probes is not None:
        if candidate.probes is None:
            not_compared["probes"] = "candidate: " + candidate.not_collected.get("probes", "none")
        else:
            probes = compare_probes(
                reference.probes, candidate.probes, rel_tol=tolerances.probe_rel_tol
            )
    if reference.heads is not None:
        if candidate.heads is None:
            not_compared["heads"] = "candidate: " + candidate.not_collected.get("heads", "none")
        else:
            heads = compare_heads(reference.heads, candidate.heads)
    long = None
    if reference.long_context is not None and golden.settings.long_context is not None:
        if candidate.long_context is None:
            why = candidate.not_collected.get("long_context", "not collected")
            not_compared["long_context"] = f"candidate: {why}"
        else:
            long = long_context.compare(
                reference.long_context, candidate.long_context, golden.settings.long_context
            )
    perplexity = None
    if teacher_forced is not None:
        perplexity = check_perplexity(
            teacher_forced.log_gaps,
            limit=tolerances.log_perplexity_ratio_max,
            confidence=tolerances.confidence,
        )
    return ParityFigures(
        golden_model=golden.model_id,
        candidate_model=candidate_model,
        candidate_url=candidate_url,
        prompts=prompts,
        teacher_forced=teacher_forced,
        teacher_forced_compared=both_scored,
        perplexity=perplexity,
        probes=probes,
        heads=heads,
        long_context=long,
        not_compared=not_compared,
    )


def held_checks(golden: Golden) -> list[ParityCheck]:
    """The comparisons a golden file allows: what its reference server gave."""
    outputs = golden.outputs
    held: list[ParityCheck] = sorted({c.api for c in outputs.completions})
    if outputs.reference is not None:
        held.append("teacher_forced")
    if outputs.probes is not None:
        held.append("probes")
    if outputs.heads is not None:
        held.append("heads")
    if outputs.long_context is not None:
        held.append("long_context")
    return held


def _result(figures: ParityFigures, tolerances: ParityTolerances, golden: Golden) -> ParityResult:
    findings = figures.failures(tolerances)
    required = tolerances.require if tolerances.require is not None else held_checks(golden)
    missing = [check for check in required if check not in figures.compared_checks()]
    divergences = [p.divergence.describe(p.prompt_id) for p in figures.prompts if p.divergence]
    tokens = f"{figures.n_tokens_identical}/{figures.n_tokens_golden} golden tokens identical"
    unseen = [f"not compared: {k}: {v}" for k, v in figures.not_compared.items()]
    if findings:
        diverged = sum(not p.passed for p in figures.prompts)
        passed: bool | None = False
        reason = (
            f"{diverged}/{len(figures.prompts)} prompts diverge beyond a near-tie, {tokens}; "
            f"{len(findings)} finding(s): " + "; ".join(findings[:3])
        )
    elif missing or not figures.compared_checks():
        passed = None
        why = [w for w in (_why_missing(c, figures.not_compared) for c in missing) if w]
        reason = (
            f"no verdict: required comparison(s) {', '.join(missing) or 'any'} could not be "
            "made (" + "; ".join(why or unseen[:3] or ["nothing to compare"]) + ")"
        )
    elif undecided := figures.undecided():
        passed = None
        reason = f"no verdict: {tokens}; " + "; ".join(undecided)
    elif short := context_shortfall(figures, tolerances, golden):
        passed, reason = None, f"no verdict: {short}"
    else:
        passed = True
        reason = f"{tokens}; compared {', '.join(figures.compared_checks())}, all within tolerance"
    return ParityResult(
        name="parity",
        passed=passed,
        reason=reason,
        figures=figures,
        evidence=findings
        + figures.undecided()
        + [d for d in divergences if d not in findings]
        + unseen,
    )


def context_shortfall(
    figures: ParityFigures, tolerances: ParityTolerances, golden: Golden
) -> str | None:
    """Why the long-context probes did not reach the context the spec says the Service is
    used with (`context_tokens`); None when they did, or when the golden's server itself
    took no longer prompt (its context is the Service's limit)."""
    wanted = tolerances.context_tokens
    if wanted is None:
        return None
    planned = golden.settings.long_context
    if planned is not None and (planned.capped or "").startswith("the server refused"):
        return None
    reached = figures.long_context.reached_tokens if figures.long_context else None
    if reached is not None and reached >= wanted * CONTEXT_REACHED:
        return None
    return (
        f"the Service is used with {wanted}-token prompts (context_tokens) but the "
        f"long-context comparison reached {reached or 0} tokens"
        + (f" ({planned.capped})" if planned and planned.capped else "")
        + f"; record the golden with `handoff golden record --context-tokens {wanted}`"
    )


def _why_missing(check: ParityCheck, not_compared: dict[str, str]) -> str | None:
    """The first reason given for a check (prompt keys end with their api in brackets)."""
    for key, why in not_compared.items():
        if key == check or key.endswith(f"({check})"):
            return f"{key}: {why}"
    return None
