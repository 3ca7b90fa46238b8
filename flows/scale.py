"""Step 8, scale up and retire.

scale_up: the candidate to its target replicas, waiting (watch) until they are
Ready, failing fast like warm. retire: each old workload to 0 replicas, kept (as
the seed keeps the reference at 0), after the swap so no client is on it. Both are
replica counts: setting the same count again changes nothing.
"""

from __future__ import annotations

from flows.kube import write
from flows.kube.objects import PodSnapshot, owned_by_deployment
from flows.kube.wait import wait_pods
from flows.ledger import Phase
from flows.progress import HandoffRun
from flows.warm import wait_candidate_ready

RETIRE_S = 180.0


def scale_up(run: HandoffRun) -> None:
    wait_candidate_ready(run, run.spec.candidate.replicas)
    run.advance(Phase.SCALED)


def retire(run: HandoffRun) -> None:
    """Old workloads to 0 (never deleted); in place there is nothing left to retire."""
    if not run.spec.in_place:
        for deployment in run.plan.current:
            write.scale_deployment(run.kube, run.spec.namespace, deployment.name, 0)
        for deployment in run.plan.current:
            wait_pods(
                run.kube,
                run.spec.namespace,
                deployment.selector,
                decide=lambda pods, d=deployment.name: _none_owned(pods, d),
                deadline_s=RETIRE_S,
                what=f"the pods of {deployment.name} to stop",
            )
    run.advance(Phase.RETIRED)


def _none_owned(pods: list[PodSnapshot], deployment: str) -> bool | None:
    return True if not any(owned_by_deployment(p, deployment) for p in pods) else None
