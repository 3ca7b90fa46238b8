"""Human-readable renderings of a plan and of a handoff record (markdown)."""

from __future__ import annotations

from pathlib import Path

from flows.capacity import Strategy
from flows.evidence import Evidence
from flows.plan import Plan
from flows.report.record import HandoffRecord
from flows.source_tree import SourceTree
from flows.spec import HandoffSpec
from gates.common import shown
from gates.latency.report import streams


def plan_markdown(plan: Plan) -> str:
    candidate = (
        "replaces the live Deployment in place"
        if plan.strategy is Strategy.IN_PLACE and plan.candidate is None
        else f"exists with {plan.candidate.replicas} replicas"
        if plan.candidate
        else "new Deployment"
    )
    lines = [
        f"**Service** `{plan.namespace}/{plan.service.name}` selector `{plan.service.selector}` "
        f"ClusterIP `{plan.service.cluster_ip}`",
        f"**Serving now:** {plan.serving.line()} ({plan.routing.route}: {plan.routing.reason})",
        "**Current:** "
        + ", ".join(
            f"`{d.name}` {d.ready_replicas}/{d.replicas} ready, {d.gpus_per_pod} GPU/pod"
            for d in plan.current
        ),
        f"**Candidate:** {plan.gpus_per_pod} GPU/pod, {candidate}",
        "**GPU ledger:** "
        + (
            ", ".join(f"{n.name} {n.free} free of {n.allocatable}" for n in plan.gpu)
            or "no GPU nodes"
        ),
        f"**Strategy:** {plan.strategy or 'refused'}",
        *[f"  - {reason}" for reason in plan.decision.reasons],
    ]
    lines.append(
        f"**Unschedulable candidate pods:** wait up to {plan.capacity_wait_s:g} s for capacity "
        "(candidate.capacity_wait_s), then fail"
        if plan.capacity_wait_s
        else "**Unschedulable candidate pods:** fail at once (candidate.capacity_wait_s: 0)"
    )
    if plan.downtime is not None:
        lines.append(plan.downtime.markdown())
    if plan.pin_live_selector:
        lines.append(
            f"**Live selector narrowed first to** `{plan.pin_live_selector}` "
            "(the candidate's pods would match it)"
        )
    lines.append("**Server-side dry-run:**")
    lines += [
        f"  - {'ok' if d.ok else 'FAILED'}: {d.write}" + (f" ({d.detail})" if d.detail else "")
        for d in plan.dry_runs
    ] or ["  - (not attempted: refused)"]
    if plan.refused:
        lines.append(f"**Refused:** {plan.refused}")
    return "\n".join(line if line.startswith("  - ") else f"- {line}" for line in lines)


def gate_policy_markdown(spec: HandoffSpec) -> str:
    """The gates that will decide during an in-place outage, with their settings."""
    gates = spec.gates
    lines = [
        f"smoke: `/v1/models` lists `{gates.model_id}` and one completion answers, "
        f"within {gates.smoke_deadline_s:g} s",
    ]
    if gates.parity is not None:
        lines.append(
            f"parity against `{gates.parity.golden.name}`, within {gates.parity.budget_s:g} s: "
            + _settings(gates.parity.tolerances.model_dump())
        )
    if gates.task is not None:
        task = gates.task
        floor = f", floor {task.floor:g} %" if task.floor is not None else ""
        baseline = f"golden scores `{task.golden.name}`" if task.golden else "no golden scores"
        lines.append(
            f"task suite `{task.suite.name}` against {baseline}, within {task.budget_s:g} s: "
            f"at most {task.margin:g} points worse{floor}"
        )
    if gates.latency is not None:
        latency = gates.latency
        lines.append(
            f"latency at {streams(*latency.levels)}, {latency.max_tokens} tokens, within "
            f"{gates.latency_budget_s:g} s: SLO {_settings(latency.slo.model_dump())}; "
            f"against a live baseline when there is one, margins "
            f"{_settings(latency.margins.model_dump())}"
        )
    if spec.approval.required and spec.approval.during_outage:
        then = (
            "all pass: a person looks at the evidence during the outage, at most "
            f"{spec.approval.outage_timeout_s:g} s (approval.outage_timeout_s); approve swaps, "
            "reject or no answer in time rolls back"
        )
    else:
        then = "all pass: the Service is swapped at once, no one is asked again"
    return "\n".join(
        [
            "**Gate policy during the outage:**",
            *[f"- {line}" for line in lines],
            f"- {then}",
            "- any fail or no verdict, or the declared estimate spent: roll back at once "
            "(the previous spec restored, the old pods Ready again), without asking",
        ]
    )


def _settings(values: dict[str, object]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items() if v is not None) or "none"


def _ran(source: SourceTree) -> str:
    """What ran: the tree's commit, where the code came from, the flow image if a Job's."""
    return (
        f"- ran commit `{source.commit or 'unknown'}`"
        + (f" ({', '.join(source.modified)} modified)" if source.modified else "")
        + (f", code from `{source.code}`" if _elsewhere(source.code, source.root) else "")
        + (f", flow image `{source.image}`" if source.image else "")
    )


def _elsewhere(code: str | None, root: str) -> bool:
    return code is not None and Path(code).resolve() != Path(root).resolve()


def record_markdown(entry: HandoffRecord, evidence: Evidence | None) -> str:
    lines = [
        f"# Handoff `{entry.spec}` of `{entry.namespace}/{entry.service}`: {entry.outcome}",
        *([f"**Cause:** {entry.cause}", ""] if entry.cause else []),
        *([f"**Gates:** {evidence.verdict()}", ""] if evidence is not None else []),
        f"- id `{entry.handoff_id}`, strategy {entry.strategy}",
        f"- trigger: {entry.trigger.source}"
        + (f", delivery `{entry.trigger.delivery_id}`" if entry.trigger.delivery_id else "")
        + (f", merge `{entry.trigger.merge_commit}`" if entry.trigger.merge_commit else ""),
        *([_ran(entry.source)] if entry.source is not None else []),
        f"- image `{entry.image}` revision label `{entry.revision}`",
        *[f"- fix {fix}" for fix in entry.fixes],
        f"- approver: {entry.approver or '-'}; evidence sha256 `{entry.evidence_sha256 or '-'}`",
        *[
            f"- {a['decision']} of {a['what']} by {a['approver']} at {a['at']} "
            f"(shown `{a['evidence_sha256'][:12]}`){': ' + a['reason'] if a['reason'] else ''}"
            for a in entry.approvals
        ],
        "- durations (s): "
        + ", ".join(f"{k} {shown.seconds(v)}" for k, v in entry.durations_s.items()),
        *(
            [
                f"- downtime: measured {shown.seconds(entry.downtime_measured_s)} s, declared "
                f"about {shown.seconds(entry.downtime_estimate_s)} s, at most "
                f"{shown.seconds(entry.downtime_bound_s)} s"
            ]
            if entry.downtime_measured_s is not None
            and entry.downtime_estimate_s is not None
            and entry.downtime_bound_s is not None
            else []
        ),
        *[f"- drained before stopping: {d.line()}" for d in entry.drains],
        *[f"- way back: {w.line()}" for w in entry.way_back],
    ]
    if entry.bake is not None:
        lines.append("\n" + entry.bake.markdown())
    if evidence is not None:
        lines.append("\n## Gates\n" + evidence.markdown())
    return "\n".join(lines)
