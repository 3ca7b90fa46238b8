"""Step 5, gates: smoke, parity, task and latency against the warm candidate.

Observes the candidate (one ready pod) and, side by side, the live baseline (a ready
pod of the live Deployment's current ReplicaSet, on the live pods' own port: see
`flows.baseline`), both through port-forwards; the latency report names both pods and
their workloads, and refuses to compare a workload with itself. Decides with `gates/`
(which returns values, never raises for a failed gate). Changes nothing on the
cluster, so a rerun simply measures again. The evidence carries every gate's
report and a hash binding them to the pinned image, for the approval.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
from collections.abc import Coroutine
from typing import Any

from flows.baseline import (
    PodIdentity,
    check_distinct,
    compute_live_port,
    describe_design,
    find_baseline,
    identify_pod,
)
from flows.capacity import Strategy
from flows.errors import GateFailed
from flows.evidence import Evidence, GateSummary
from flows.kube.portforward import Forward, pod_forward, problems_note
from flows.ledger import Phase
from flows.run import HandoffRun
from gates.common.result import GateResult
from gates.common.settings import LatencySettings
from gates.errors import GateError
from gates.latency.gate import run_latency_async
from gates.parity.gate import run_parity_async
from gates.parity.golden_format import Golden
from gates.smoke import run_smoke_async
from gates.task.gate import TaskRule, run_task_async
from gates.task.golden import load_task_golden
from gates.task.suite import load_suite


def _forward(run: HandoffRun, pod: str) -> contextlib.AbstractContextManager[Forward]:
    return pod_forward(run.kube, run.spec.namespace, pod, run.spec.candidate.port)


def _baseline(run: HandoffRun) -> PodIdentity | None:
    """A ready pod of a live workload, when side by side (in place it is gone)."""
    if run.plan.strategy is not Strategy.SIDE_BY_SIDE:
        return None
    candidate_template = run.plan.manifest["spec"]["template"]
    for deployment in run.plan.current:
        port = compute_live_port(
            service_ports=run.plan.service.ports,
            candidate_template=candidate_template,
            candidate_port=run.spec.candidate.port,
            live_template=deployment.spec["template"],
        )
        found = find_baseline(run.kube, run.spec.namespace, deployment, port)
        if found is not None:
            return found
    return None


class _Live:
    """The live baseline of one gating step, found and forwarded to at most once, when
    a gate first asks: the task and latency gates compare with the same pod."""

    def __init__(
        self, run: HandoffRun, stack: contextlib.ExitStack[bool | None], forwards: list[Forward]
    ) -> None:
        self.run, self.stack, self.forwards = run, stack, forwards
        self._url: str | None = None

    @functools.cached_property
    def pod(self) -> PodIdentity | None:
        return _baseline(self.run)

    def url(self, pod: PodIdentity) -> str:
        if self._url is None:
            ns = self.run.spec.namespace
            forward = self.stack.enter_context(pod_forward(self.run.kube, ns, pod.pod, pod.port))
            self.forwards.append(forward)
            self._url = forward.url
        return self._url


def run_gates(run: HandoffRun, candidate_pods: tuple[str, ...]) -> Evidence:
    """Run every configured gate; raise GateFailed (with the evidence) unless all pass.
    A resumed run that was already approved keeps the evidence it was approved on.
    In place each gate is held to its budget (cut to what is left of the declared
    outage): one that runs over has no verdict, and no verdict rolls back."""
    if run.reached(Phase.APPROVED):
        return Evidence(image=run.ledger.image, gates=[], sha256=run.ledger.evidence_sha256 or "")
    gates, summaries, forwards = run.spec.gates, [], []
    bounded = run.plan.strategy is Strategy.IN_PLACE
    with contextlib.ExitStack() as stack:
        candidate = stack.enter_context(_forward(run, candidate_pods[0]))
        forwards.append(candidate)
        live = _Live(run, stack, forwards)
        url = candidate.url
        smoke = run_smoke_async(url, model_id=gates.model_id, deadline_s=gates.smoke_deadline_s)
        summaries.append(_within(run, "smoke", gates.smoke_deadline_s, smoke, bounded))
        if gates.parity is not None:
            golden = Golden.load(gates.parity.golden)
            parity = run_parity_async(url, golden, gates.parity.tolerances, model_id=gates.model_id)
            summaries.append(_within(run, "parity", gates.parity.budget_s, parity, bounded))
        if gates.task is not None:
            summaries.append(_task(run, url, live, bounded))
        if gates.latency is not None:
            summaries.append(_latency(run, gates.latency, candidate_pods[0], url, live, bounded))
    problems = list(dict.fromkeys(p for f in forwards for p in f.problems()))
    evidence = _evidence(run, summaries, problems)
    run.evidence = evidence
    # Side by side, a gate that could not tell stops the handoff before the swap and a
    # person decides at the approval (--auto-approve decides for them, and says so); in
    # place the gates decide alone, so anything but a pass rolls back.
    if not evidence.passed and (bounded or not evidence.for_a_person):
        failed = [g for g in summaries if g.verdict != "pass"]
        raise GateFailed(
            "gates did not pass: "
            + "; ".join(f"{g.name} {g.verdict}: {g.reason}" for g in failed)
            + problems_note(problems)
        )
    run.advance(Phase.GATED, evidence_sha256=evidence.sha256)
    return evidence


def _within(
    run: HandoffRun,
    name: str,
    budget_s: float,
    gate: Coroutine[Any, Any, Any],
    bounded: bool,
    **sides: PodIdentity | None,
) -> GateSummary:
    """The gate's summary; bounded, a gate still running at its budget has no verdict."""
    if not bounded:
        return _summary(asyncio.run(gate), **sides)
    limit = run.limit(budget_s)

    async def timed() -> Any:
        return await asyncio.wait_for(gate, limit)

    try:
        return _summary(asyncio.run(timed()), **sides)
    except TimeoutError:
        return _no_verdict(
            name,
            f"no verdict within {limit:.0f} s (its budget {budget_s:g} s, cut to what is "
            "left of the declared downtime)",
        )


def _no_verdict(name: str, reason: str) -> GateSummary:
    return GateSummary(name=name, verdict="no verdict", reason=reason, markdown=reason, figures={})


def _task(run: HandoffRun, candidate_url: str, live: _Live, bounded: bool) -> GateSummary:
    """The task gate against the live baseline side by side, else the golden scores."""
    spec, model = run.spec.gates.task, run.spec.gates.model_id
    assert spec is not None
    try:
        suite = load_suite(spec.suite)
        golden = load_task_golden(spec.golden) if spec.golden is not None else None
    except GateError as exc:
        return _no_verdict("task", f"no verdict: {exc}")
    rule = TaskRule(margin=spec.margin, floor=spec.floor)
    baseline = live.pod
    if baseline is None:
        if golden is None:
            return _no_verdict(
                "task",
                "no verdict: no live server to compare with and no golden scores "
                "(gates.task.golden); record them from the live server with "
                "`handoff golden record --task-suite`",
            )
        gate = run_task_async(candidate_url, suite, rule, golden=golden, model_id=model)
        return _within(run, "task", spec.budget_s, gate, bounded)
    baseline_url = live.url(baseline)
    gate = run_task_async(candidate_url, suite, rule, baseline_url=baseline_url, model_id=model)
    return _within(run, "task", spec.budget_s, gate, bounded)


def _latency(
    run: HandoffRun,
    settings: LatencySettings,
    candidate_pod: str,
    candidate_url: str,
    live: _Live,
    bounded: bool,
) -> GateSummary:
    """The latency gate against the live baseline; the summary names both sides."""
    budget = run.spec.gates.latency_budget_s
    model, ns = run.spec.gates.model_id, run.spec.namespace
    candidate = identify_pod(run.kube, ns, candidate_pod, run.spec.candidate.port)
    baseline = live.pod
    if baseline is None:
        gate = run_latency_async(
            candidate_url, None, settings, candidate_model=model, slots=candidate.slots
        )
        return _within(run, "latency", budget, gate, bounded, candidate=candidate)
    check_distinct(baseline, candidate)
    # Levels within the fewer slots of the two: past them one side measures its queue.
    slots = baseline.slots.tighter(candidate.slots) if baseline.slots else candidate.slots
    baseline_url = live.url(baseline)
    gate = run_latency_async(
        candidate_url, baseline_url, settings, candidate_model=model, slots=slots
    )
    return _within(run, "latency", budget, gate, bounded, candidate=candidate, baseline=baseline)


def _summary(
    result: GateResult[Any],
    *,
    candidate: PodIdentity | None = None,
    baseline: PodIdentity | None = None,
) -> GateSummary:
    figures = result.figures.model_dump(mode="json")
    sides = ""
    if candidate is not None:
        figures["candidate"] = candidate.model_dump()
        figures["baseline"] = baseline.model_dump() if baseline else None
        sides = f"**Candidate:** {candidate.describe()}  \n**Baseline:** " + (
            baseline.describe() if baseline else "none (SLOs only)"
        )
        if baseline is not None:
            sides += f"  \n**Design:** {describe_design(baseline, candidate)}"
            figures["shared_node"] = baseline.node is not None and baseline.node == candidate.node
    return GateSummary(
        name=result.name,
        verdict=result.verdict,
        reason=result.reason,
        markdown=result.body(preface=sides),
        figures=figures,
    )


def _evidence(run: HandoffRun, summaries: list[GateSummary], problems: list[str]) -> Evidence:
    digest = hashlib.sha256((run.ledger.image or "").encode())
    for gate in summaries:
        digest.update(gate.markdown.encode())
    for problem in problems:
        digest.update(problem.encode())
    return Evidence(
        image=run.ledger.image,
        gates=summaries,
        sha256=digest.hexdigest(),
        port_forward_problems=problems,
    )
