"""Human-readable renderings of a plan and of a handoff record (markdown)."""

from __future__ import annotations

from flows.capacity import Strategy
from flows.gating import Evidence
from flows.plan import Plan
from flows.record import HandoffRecord


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
    if plan.downtime_bound_s is not None:
        lines.append(
            f"**Declared downtime:** at most ~{plan.downtime_bound_s:.0f} s "
            "(old pods' grace + candidate start allowance + gates); needs approval"
        )
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


def record_markdown(entry: HandoffRecord, evidence: Evidence | None) -> str:
    lines = [
        f"# Handoff `{entry.spec}` of `{entry.namespace}/{entry.service}`: {entry.outcome}",
        f"- id `{entry.handoff_id}`, strategy {entry.strategy}",
        f"- trigger: {entry.trigger.source}"
        + (f", delivery `{entry.trigger.delivery_id}`" if entry.trigger.delivery_id else "")
        + (f", merge `{entry.trigger.merge_commit}`" if entry.trigger.merge_commit else ""),
        f"- image `{entry.image}` revision label `{entry.revision}`",
        *[f"- fix {fix}" for fix in entry.fixes],
        f"- approver: {entry.approver or '-'}; evidence sha256 `{entry.evidence_sha256 or '-'}`",
        "- durations (s): " + ", ".join(f"{k} {v:g}" for k, v in entry.durations_s.items()),
    ]
    if entry.cause:
        lines.append(f"- **cause:** {entry.cause}")
    if evidence is not None:
        lines.append("\n## Gates\n" + evidence.markdown())
    return "\n".join(lines)
