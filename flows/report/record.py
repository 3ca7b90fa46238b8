"""Step 9, record: the handoff's audit record, on the Service and as a report.

The record (trigger, image and fix evidence, gate verdicts, approver, outcome,
rollback cause, durations per step) is appended to the Service's history
annotation (newest HISTORY_KEEP kept) and announced by an Event on the Service;
the flow also stores it as Prefect artifacts. `handoff history` reads both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from flows.bake_report import BakeReport
from flows.drain import Drained
from flows.kube import read, write
from flows.kube.client import Kube
from flows.ledger import (
    HISTORY_ANNOTATION,
    HISTORY_KEEP,
    TERMINAL,
    Ledger,
    appended_history,
    history_entries,
    parse_ledger,
)
from flows.provenance import FixEvidence
from flows.report.attest import BundleRef, publish
from flows.report.timeline import StepSpan
from flows.source_tree import SourceTree
from flows.spec import HandoffSpec
from flows.wayback import WayBack


class Trigger(BaseModel):
    """What started the handoff (a merge via the webhook relay, or a person)."""

    source: str = "cli"
    delivery_id: str | None = None
    merge_commit: str | None = None
    repository: str | None = None
    merged_at: str | None = None  # the forge's merge time, as the event carries it
    signature: str | None = None  # the relay's (flows/webhook/event_signature.py)


class HandoffRecord(BaseModel):
    handoff_id: str
    spec: str
    namespace: str
    service: str
    strategy: str | None
    outcome: str
    cause: str | None = None
    image: str | None = None
    revision: str | None = None
    fixes: list[str] = Field(default_factory=list)
    gates: dict[str, str] = Field(default_factory=dict)
    gate_figures: dict[str, Any] = Field(default_factory=dict)
    approver: str | None = Field(None, description="every approver, in order")
    approvals: list[dict[str, Any]] = Field(default_factory=list)
    evidence_sha256: str | None = None
    evidence_bundle: BundleRef | None = Field(None, description="flows/report/attest.py")
    trigger: Trigger = Trigger()
    source: SourceTree | None = Field(None, description="the commit and files that ran")
    durations_s: dict[str, float] = Field(default_factory=dict)
    steps: list[StepSpan] = Field(default_factory=list, description="for the timeline")
    ready_endpoints: list[tuple[float, int]] = Field(
        default_factory=list, description="(epoch s, ready endpoints) at each change, sampled"
    )
    ready_by_workload: list[tuple[float, dict[str, int]]] = Field(
        default_factory=list, description="the same instants, counted per workload (role)"
    )
    workloads: dict[str, str] = Field(default_factory=dict, description="role: Deployment")
    endpoints_note: str | None = Field(None, description="why ready endpoints are missing")
    downtime_bound_s: float | None = None
    downtime_estimate_s: float | None = None
    downtime_measured_s: float | None = Field(
        None, description="in place: old pods told to stop until Endpoints held ready pods"
    )
    downtime_parts: list[str] = Field(default_factory=list)
    candidate_start_s: float | None = Field(None, description="candidate scaled to Ready")
    bake: BakeReport | None = Field(None, description="the bake after the scale-up, if any")
    drains: list[Drained] = Field(
        default_factory=list, description="each workload's wait for its generations to end"
    )
    way_back: list[WayBack] = Field(
        default_factory=list, description="what serving again would cost each retired workload"
    )
    started_at: str
    finished_at: str
    flow_run_id: str | None = None
    changed: bool = Field(
        True, description="False: the Service already served the spec's revision; nothing written"
    )

    def compact(self) -> dict[str, Any]:
        """What fits in the annotation: figures stay in the Prefect artifact."""
        return self.model_dump(exclude={"gate_figures"}, exclude_none=True)


def record(
    kube: Kube,
    spec: HandoffSpec,
    entry: HandoffRecord,
    ledger: Ledger | None,
    fixes: Sequence[FixEvidence] = (),
) -> None:
    """Store the evidence bundle, append the record (with the bundle's digest) to the
    Service's history and announce it with an Event."""
    where = f"Service {spec.namespace}/{spec.service}"
    earlier = history_entries(read.read_service(kube, spec.namespace, spec.service).annotations)
    if not any(
        e.get("handoff_id") == entry.handoff_id and e.get("outcome") == entry.outcome
        for e in earlier
    ):  # a record already written keeps the bundle it names
        kept = {
            str(e["evidence_bundle"].get("key"))
            for e in earlier[-(HISTORY_KEEP - 1) :]
            if isinstance(e.get("evidence_bundle"), dict)
        }
        entry.evidence_bundle = publish(kube, spec, entry.model_dump(), fixes, kept=kept)

    def changes(annotations: dict[str, str]) -> dict[str, str | None] | None:
        recorded = any(
            e.get("handoff_id") == entry.handoff_id and e.get("outcome") == entry.outcome
            for e in history_entries(annotations, where=where)
        )
        return (
            None
            if recorded
            else {HISTORY_ANNOTATION: appended_history(annotations, entry.compact())}
        )

    write.update_service_annotations(kube, spec.namespace, spec.service, changes)
    if entry.outcome == "rolled-back" or not entry.changed:
        return  # the rollback announced itself, with its cause; nothing to do, no Event
    message = (
        f"handoff {entry.handoff_id} ({entry.spec}): {entry.outcome}"
        + (f", image {entry.image}" if entry.image else "")
        + (f", approved by {entry.approver}" if entry.approver else "")
        + (f"; cause: {entry.cause}" if entry.cause else "")
    )
    announce(
        kube,
        spec,
        reason="HandoffCompleted" if entry.outcome == "done" else "HandoffStopped",
        message=message,
        warning=entry.outcome != "done",
    )


def recover(kube: Kube, spec: HandoffSpec) -> HandoffRecord | None:
    """The record of a finished handoff whose run ended between its ledger's last write
    and its history entry (killed, or the apiserver lost), rebuilt from the ledger and
    appended, so no audit record is lost; None when nothing is missing."""
    service = read.read_service(kube, spec.namespace, spec.service)
    ledger = parse_ledger(service.annotations)
    if ledger is None or ledger.phase not in TERMINAL:
        return None
    where = f"Service {spec.namespace}/{spec.service}"
    if any(
        e.get("handoff_id") == ledger.handoff_id
        for e in history_entries(service.annotations, where=where)
    ):
        return None
    entry = HandoffRecord(
        handoff_id=ledger.handoff_id,
        spec=ledger.spec,
        namespace=spec.namespace,
        service=spec.service,
        strategy=ledger.strategy,
        outcome=str(ledger.phase),
        cause=ledger.cause,
        image=ledger.image,
        revision=ledger.revision,
        approver=", ".join(a.approver for a in ledger.approvals) or None,
        approvals=[a.model_dump() for a in ledger.approvals],
        evidence_sha256=ledger.evidence_sha256,
        endpoints_note="recovered from the ledger: its run ended before writing this record",
        started_at=ledger.started_at,
        finished_at=ledger.updated_at,
    )
    record(kube, spec, entry, ledger)
    return entry


def announce(kube: Kube, spec: HandoffSpec, *, reason: str, message: str, warning: bool) -> None:
    """An Event on the handed-off Service, where `kubectl describe service` shows it."""
    service = read.read_service(kube, spec.namespace, spec.service)
    write.record_event(
        kube,
        namespace=spec.namespace,
        kind="Service",
        name=spec.service,
        uid=service.uid,
        reason=reason,
        message=message,
        warning=warning,
    )
