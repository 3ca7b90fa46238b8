"""Step 8, scale up and retire.

scale_up: the candidate to its target replicas, waiting (watch) until they are
Ready, failing fast like warm. retire: each old workload to 0 replicas, kept (as
the seed keeps the reference at 0), after the swap and only once the Service's
EndpointSlices and Endpoints no longer route to it, so no new client reaches a pod
that is stopping, and once the generations its pods still run have ended (flows/drain.py);
what bringing it back would cost is recorded first (flows/wayback.py). Both are replica
counts: setting the same count again changes nothing.
"""

from __future__ import annotations

from flows.kube import write
from flows.kube.objects import PodSnapshot, owned_by_deployment
from flows.kube.wait import wait_pods, wait_rolled_out
from flows.ledger import Phase
from flows.render import (
    HANDOFF_ID_ANNOTATION,
    compute_startup_allowance,
    render_candidate,
)
from flows.retiring import drain_workloads, record_way_back
from flows.run import HandoffRun
from flows.swap import (
    live_only_selector,
    point_service,
    settle_data_plane,
    target_selector,
    verify_service,
)
from flows.warm import wait_candidate_ready

RETIRE_S = 180.0


def scale_up(run: HandoffRun) -> None:
    """The candidate to its target (a twin stays at preview: the live Deployment takes
    the target when it is rewritten at retirement)."""
    if not run.twin and not run.reached(Phase.SCALED):
        wait_candidate_ready(run, run.spec.candidate.replicas)
    run.advance(Phase.SCALED)


def retire(run: HandoffRun, *, record: bool = True) -> None:
    """Old workloads to 0 (kept, never deleted). Replacing the live Deployment in place
    there is nothing left; through a twin, the live Deployment now takes the candidate's
    spec (its pods carry the revision the Service selects) and the twin is removed.
    `record=False` leaves the ledger before `retired`, for a retirement that comes
    before the scale-up (the ledger's phases only go forward)."""
    if run.reached(Phase.RETIRED):
        return
    if run.twin:
        _rewrite_live_and_remove_twin(run)
    elif not run.spec.replaces_live:
        verify_service(run, target_selector(run))
        settle_data_plane()  # routes are verified in the API; the proxies follow
        record_way_back(run)
        drain_workloads(run, [d.name for d in run.plan.current])
        for deployment in run.plan.current:
            write.scale_deployment(
                run.kube,
                run.spec.namespace,
                deployment.name,
                0,
                expected=run.recorded_replicas(deployment.name),
            )
        for deployment in run.plan.current:
            _wait_none_owned(run, deployment.name, deployment.selector)
    if record:
        run.advance(Phase.RETIRED)


def _rewrite_live_and_remove_twin(run: HandoffRun) -> None:
    """The live Deployment takes the candidate's spec beside the twin (same revision, so
    the Service serves both); then the Service narrows to the live pods, and only then
    is the twin removed, so no client is sent to a pod that is shutting down."""
    spec, manifest = run.spec, run.plan.manifest
    body = render_candidate(
        spec,
        manifest,
        pinned=run.ledger.image,
        revision=run.ledger.revision or "",
        replicas=spec.candidate.replicas,
        handoff_id=run.ledger.handoff_id,
    )
    write.apply_deployment(run.kube, body)
    deadline = compute_startup_allowance(manifest, spec.candidate.container) + 60.0
    wait_rolled_out(run.kube, spec.namespace, spec.candidate.deployment, deadline_s=deadline)
    target = target_selector(run)
    point_service(run, live_only_selector(run, target), came_from=[target])  # off the twin
    settle_data_plane()
    drain_workloads(run, [run.candidate_name])
    write.delete_deployment(
        run.kube,
        spec.namespace,
        run.candidate_name,
        marked=(HANDOFF_ID_ANNOTATION, run.ledger.handoff_id),
    )
    _wait_none_owned(run, run.candidate_name, manifest["spec"]["selector"]["matchLabels"])


def _wait_none_owned(run: HandoffRun, name: str, selector: dict[str, str]) -> None:
    wait_pods(
        run.kube,
        run.spec.namespace,
        selector,
        decide=lambda pods: _none_owned(pods, name),
        deadline_s=RETIRE_S,
        what=f"the pods of {name} to stop",
    )


def _none_owned(pods: list[PodSnapshot], deployment: str) -> bool | None:
    return True if not any(owned_by_deployment(p, deployment) for p in pods) else None
