"""Step 3, apply at replicas 0.

Observes the plan and the pinned image; decides the candidate's revision (a hash of
its pod template and the pinned image, so a rerun computes the same one); changes:
narrows the live selector first when the candidate's pods would match it, then
server-side applies the candidate at 0 replicas with the pinned image, the revision
label and the handoff annotation. In place, the same apply stops the old pods (that
is the declared downtime) and the step waits until they are gone. Server-side apply
is idempotent: reapplying the same body changes nothing.
"""

from __future__ import annotations

import time

from flows.capacity import Strategy
from flows.image import PinnedImage
from flows.kube import write
from flows.kube.objects import PodSnapshot, owned_by_deployment
from flows.kube.wait import wait_pods
from flows.ledger import REVISION_LABEL, OutageRecord, Phase
from flows.outage import OutageClock
from flows.render import compute_revision, render_candidate, template_sha256, unpinned_image
from flows.retiring import drain_workloads, record_way_back
from flows.run import HandoffRun

OLD_PODS_GONE_S = 120.0


def apply_at_zero(run: HandoffRun, image: PinnedImage | None) -> str:
    """Apply the candidate at 0 replicas; returns its revision."""
    spec, plan = run.spec, run.plan
    manifest = plan.manifest
    pinned = image.ref if image else unpinned_image(spec, manifest)
    revision = compute_revision(spec, manifest, pinned)
    if run.reached(Phase.APPLIED):
        return run.ledger.revision or revision
    if not run.ledger.wrote:  # from here a rollback has something to undo
        run.advance(run.ledger.phase, wrote=True)
    if plan.pin_live_selector:
        # From a fresh read under its resourceVersion, never the plan's copy: a change
        # made since then is neither merged into the pin nor overwritten unseen.
        write.update_service_selector(
            run.kube,
            spec.namespace,
            spec.service,
            plan.pin_live_selector,
            expected=lambda found: found == run.ledger.snapshot.selector,
        )
    body = render_candidate(
        spec,
        manifest,
        pinned=pinned,
        revision=revision,
        replicas=0,
        handoff_id=run.ledger.handoff_id,
        twin=run.twin,
    )
    if plan.strategy is Strategy.IN_PLACE:
        if run.outage is None:  # not yet stopped: their generations end first, if they can
            record_way_back(run)
            # The Service still routes to them: a moment with none in flight, by metrics.
            drain_workloads(run, [d.name for d in plan.current], connections=False)
        # The outage the plan declared starts here: the old pods release their GPUs.
        # Its start is on the cluster before the first pod stops.
        _start_outage(run)
        for deployment in plan.current:
            write.scale_deployment(
                run.kube,
                spec.namespace,
                deployment.name,
                0,
                expected=run.recorded_replicas(deployment.name),
            )
    applied = write.apply_deployment(run.kube, body)
    if plan.strategy is Strategy.IN_PLACE:
        _wait_old_pods_gone(run, revision)
        run.advance(Phase.OLD_STOPPED)
    run.advance(
        Phase.APPLIED,
        revision=revision,
        image=pinned,
        candidate_uid=applied["metadata"]["uid"],
        candidate_template_sha256=template_sha256(applied["spec"]["template"]),
    )
    return revision


def _start_outage(run: HandoffRun) -> None:
    declared = run.plan.downtime
    if declared is None or run.outage is not None:
        return
    record = OutageRecord(
        started=time.time(), estimate_s=declared.estimate_s, bound_s=declared.bound_s
    )
    run.advance(run.ledger.phase, outage=record)
    run.outage = OutageClock(**record.model_dump())


def _wait_old_pods_gone(run: HandoffRun, revision: str) -> None:
    """In place: the old pods must be gone (their GPUs freed) before the candidate scales."""
    for deployment in run.plan.current:

        def gone(pods: list[PodSnapshot], name: str = deployment.name) -> bool | None:
            old = [
                p
                for p in pods
                if owned_by_deployment(p, name) and p.labels.get(REVISION_LABEL) != revision
            ]
            return True if not old else None

        wait_pods(
            run.kube,
            run.spec.namespace,
            deployment.selector,
            decide=gone,
            deadline_s=run.limit(OLD_PODS_GONE_S),
            what=f"the old pods of {deployment.name} to stop",
        )
