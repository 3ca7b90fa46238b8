"""Open and close one handoff run: plan, Lease, ledger in; record and artifacts out."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import cast

from prefect import get_run_logger
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.runtime import flow_run

from flows import signals
from flows.kube.client import connect
from flows.lease import ServiceLease, read_holder
from flows.ledger import Ledger, unfinished_in
from flows.ledger_store import now_iso
from flows.plan import make_plan
from flows.ready_workloads import ReadyWorkloads, workload_names
from flows.report.markdown import plan_markdown, record_markdown
from flows.report.notify import load_notifier
from flows.report.pictures import publish_timeline
from flows.report.record import HandoffRecord, Trigger, record, recover
from flows.report.timeline import ReadyEndpoints, Timeline, totals
from flows.run import HandoffRun
from flows.slots import service_slot
from flows.source_tree import SourceTree
from flows.spec import HandoffSpec
from flows.start import start_or_resume, unfinished


def _run_id() -> str:
    return str(flow_run.id or uuid.uuid4())


@contextmanager
def begin(
    spec: HandoffSpec,
    *,
    kubeconfig: str | None,
    queue_s: float = 0.0,
    on_turn: Callable[[], object] | None = None,
) -> Iterator[HandoffRun]:
    """Take the Service's turn (waiting up to queue_s behind another handoff of it),
    call on_turn, then plan, take the Service's Lease, start or resume the ledger.
    The plan is made once the turn is this run's: the run before may change the Service."""
    notifier = load_notifier(spec)  # a wrong block name fails here, before any write
    kube = connect(kubeconfig)
    log = get_run_logger()
    holder = _run_id()
    if queue_s:
        log.info("waiting up to %.0f s for Service %s's turn", queue_s, spec.service)
    with service_slot(
        spec.namespace,
        spec.service,
        resuming=_resuming(unfinished(kube, spec), spec),
        queue_s=queue_s,
    ):
        if on_turn is not None:
            on_turn()
        plan = make_plan(kube, spec)
        log.info("plan for %s:\n%s", spec.name, plan_markdown(plan))
        # The plan's read of the Service holds the ledger as the turn found it; the run
        # reads it again once it holds the Lease (the run waited for may have moved it).
        resuming = _resuming(unfinished_in(plan.service.annotations), spec)
        wait_for = read_holder(kube, spec.namespace, spec.service) if resuming else None
        with ServiceLease(kube, spec.namespace, spec.service, holder, wait_for=wait_for) as lease:
            # Every write of the run passes the Lease's fence: a lost Lease stops it.
            fenced = dataclasses.replace(kube, fence=lease.check)
            recovered = recover(fenced, spec)  # the last run's record, if it was lost
            if recovered is not None:
                log.warning(
                    "recorded handoff %s (%s) from its ledger: its run ended before its "
                    "history entry was written",
                    recovered.handoff_id,
                    recovered.outcome,
                )
            # Outside an event loop, as here, Prefect's create returns the id, not a coroutine
            progress = cast(
                uuid.UUID,
                create_progress_artifact(progress=0.0, description=f"handoff {spec.name}"),
            )
            run: HandoffRun | None = None

            def revision() -> str | None:  # the ledger's, known once the run has one
                return run.ledger.revision if run is not None else None

            try:
                with (
                    signals.noted(),
                    ReadyEndpoints(ReadyWorkloads(kube, spec, revision)) as ready,
                    # The ledger's write comes last, right before the steps: a failure or
                    # a cancellation from there on rolls back (flows/handoff.py). One
                    # that meets the write, or comes between its answer and the steps, is
                    # held back until the steps begin (delivered there).
                    signals.held() as cancelled,
                ):
                    run = start_or_resume(fenced, spec, plan, run_id=holder)
                    run.notifier, run.ready, run.cancelled = notifier, ready, cancelled
                    run.workloads = workload_names(spec, plan)
                    run.on_progress = lambda pct: update_progress_artifact(progress, pct)
                    yield run
            finally:  # done, rolled back, failed or cancelled: the run is over either way
                ended = run.ledger.phase if run is not None else "not started"
                _complete(progress, f"handoff {spec.name}: {ended}")
    kube.close()


def _resuming(pending: Ledger | None, spec: HandoffSpec) -> bool:
    """The Service's unfinished handoff is one of this very spec."""
    return pending is not None and pending.spec == spec.name


def _complete(progress: uuid.UUID, description: str) -> None:
    """Progress to 100 %; a Prefect API error here must not hide why the run ended."""
    try:
        update_progress_artifact(progress, 100.0, description=description)
    except Exception as exc:  # the run's own outcome matters more
        get_run_logger().warning("progress artifact %s not set to 100 %%: %s", progress, exc)


def finish(
    run: HandoffRun, trigger: Trigger | None, source: SourceTree | None = None
) -> HandoffRecord:
    """Write the audit record to the Service and as Prefect artifacts."""
    ledger, gates, pinned = run.ledger, run.evidence, run.pinned
    by_workload = run.ready.samples() if run.ready else []
    entry = HandoffRecord(
        handoff_id=ledger.handoff_id,
        spec=run.spec.name,
        namespace=run.spec.namespace,
        service=run.spec.service,
        strategy=ledger.strategy,
        outcome=str(ledger.phase),
        cause=ledger.cause,
        image=ledger.image,
        revision=ledger.revision,
        fixes=[f"{f.commit[:12]} {f.found} ({f.matching_commit[:12]})" for f in pinned.fixes]
        if pinned
        else [],
        gates={g.name: g.verdict for g in gates.gates} if gates else {},
        gate_figures={g.name: g.figures for g in gates.gates} if gates else {},
        approver=", ".join(a.approver for a in ledger.approvals) or None,
        approvals=[a.model_dump() for a in ledger.approvals],
        evidence_sha256=ledger.evidence_sha256,
        trigger=trigger or Trigger(),
        source=source,
        durations_s=dict(run.timings),
        steps=list(run.spans),
        ready_endpoints=totals(by_workload),
        ready_by_workload=by_workload,
        workloads=run.workloads,
        endpoints_note=run.ready.error if run.ready else "not sampled",
        downtime_bound_s=ledger.outage.bound_s if ledger.outage else run.plan.downtime_bound_s,
        downtime_estimate_s=ledger.outage.estimate_s
        if ledger.outage
        else (run.plan.downtime.estimate_s if run.plan.downtime else None),
        downtime_measured_s=run.downtime_measured_s,
        downtime_parts=[p.line() for p in run.plan.downtime.parts + run.plan.downtime.rollback]
        if run.plan.downtime
        else [],
        candidate_start_s=run.candidate_start_s,
        bake=run.bake,
        drains=list(run.drains),
        way_back=list(run.way_back),
        started_at=ledger.started_at,
        finished_at=now_iso(),
        flow_run_id=_run_id(),
        changed=run.nothing_to_do is None,
    )
    record(run.kube, run.spec, entry, ledger, pinned.fixes if pinned else ())
    key = f"handoff-{run.spec.service}"
    create_markdown_artifact(
        record_markdown(entry, gates),
        key=key,
        description=f"handoff {run.spec.name}: {entry.outcome}",
    )
    if gates:
        rows = [{"gate": g.name, "verdict": g.verdict, "reason": g.reason} for g in gates.gates]
        create_table_artifact(
            rows,
            key=f"gates-{run.spec.service}",
            description=f"gate verdicts of handoff {run.spec.name}",
        )
    _publish_timeline(Timeline.model_validate(entry.model_dump()))
    return entry


def _publish_timeline(timeline: Timeline) -> None:
    """The timeline artifact; failing to draw it must not hide how the handoff ended."""
    try:
        publish_timeline(timeline)
    except Exception as exc:  # the record is written: the run's outcome stands
        get_run_logger().warning(
            "timeline of handoff %s not published: %s", timeline.handoff_id, exc
        )
