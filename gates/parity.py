"""Parity gate: does the candidate answer as the golden reference did?

Replays the golden file's prompts and reference text against the candidate at concurrency 1
and compares (gates.parity_compare). A candidate that zeroes a channel band stays well formed;
only these comparisons catch it.
"""

from __future__ import annotations

import asyncio

from gates import api
from gates.collect import collect_outputs
from gates.errors import ServerError
from gates.golden_format import Golden, ModelOutputs
from gates.parity_compare import (
    compare_completion,
    compare_heads,
    compare_probes,
    compare_teacher_forced,
)
from gates.parity_report import ParityFigures
from gates.result import GateResult
from gates.settings import ParityTolerances

ParityResult = GateResult[ParityFigures]
REQUEST_TIMEOUT_S = 120.0


def run_parity(
    url: str,
    golden: Golden,
    tolerances: ParityTolerances | None = None,
    *,
    model_id: str | None = None,
) -> ParityResult:
    """Compare the server at `url` with `golden`; model id defaults to the golden's."""
    return asyncio.run(run_parity_async(url, golden, tolerances, model_id=model_id))


async def run_parity_async(
    url: str,
    golden: Golden,
    tolerances: ParityTolerances | None = None,
    *,
    model_id: str | None = None,
) -> ParityResult:
    """As `run_parity`, inside a running event loop."""
    tolerances = tolerances or ParityTolerances()
    model_id = model_id or golden.model_id
    try:
        async with api.make_client(url, timeout_s=REQUEST_TIMEOUT_S) as client:
            outputs = await collect_outputs(client, model_id=model_id, settings=golden.settings)
    except ServerError as exc:
        return ParityResult(
            name="parity",
            passed=None,
            reason=f"no verdict: {exc}",
            figures=ParityFigures(
                golden_model=golden.model_id, candidate_model=model_id, candidate_url=url
            ),
        )
    figures = compare_outputs(
        golden, outputs, tolerances, candidate_model=model_id, candidate_url=url
    )
    return _result(figures, tolerances)


def compare_outputs(
    golden: Golden,
    candidate: ModelOutputs,
    tolerances: ParityTolerances,
    *,
    candidate_model: str,
    candidate_url: str,
) -> ParityFigures:
    """Every comparison of one candidate's outputs against the golden file (pure)."""
    reference = golden.outputs
    by_id = {c.prompt_id: c for c in candidate.completions}
    return ParityFigures(
        golden_model=golden.model_id,
        candidate_model=candidate_model,
        candidate_url=candidate_url,
        prompts=[
            compare_completion(
                g, by_id[g.prompt_id], top_k=tolerances.top_k, max_gap=tolerances.near_tie_max_gap
            )
            for g in reference.completions
        ],
        teacher_forced=compare_teacher_forced(reference.reference, candidate.reference),
        probes=compare_probes(
            reference.probes, candidate.probes or {}, rel_tol=tolerances.probe_rel_tol
        )
        if reference.probes
        else [],
        heads=compare_heads(reference.heads, candidate.heads or {}) if reference.heads else [],
    )


def _result(figures: ParityFigures, tolerances: ParityTolerances) -> ParityResult:
    findings = figures.failures(tolerances)
    divergences = [p.divergence.describe(p.prompt_id) for p in figures.prompts if p.divergence]
    tokens = f"{figures.n_tokens_identical}/{figures.n_tokens_golden} golden tokens identical"
    if findings:
        diverged = sum(not p.passed for p in figures.prompts)
        reason = (
            f"{diverged}/{len(figures.prompts)} prompts diverge beyond a near-tie, {tokens}; "
            f"{len(findings)} finding(s): " + "; ".join(findings[:3])
        )
    else:
        reason = f"{tokens}; teacher-forced, probe and head checks within tolerance"
    return ParityResult(
        name="parity",
        passed=not findings,
        reason=reason,
        figures=figures,
        evidence=findings + [d for d in divergences if d not in findings],
    )
