"""Roll back: restore the Service and its workloads from the ledger's snapshot.

Works from what is recorded on the cluster only, so it runs after a crash as well
as after a failed step (`handoff rollback SPEC`). Order keeps clients served where
it can: the old workloads come back and are Ready first, then the selector goes
back, then the candidate goes to its previous replica count (0 if it is new; it
is kept, not deleted). In place, the previous Deployment spec is put back whole.
Each write checks the cluster first, so a second rollback changes nothing.
"""

from __future__ import annotations

from flows.errors import HandoffError
from flows.kube import read, write
from flows.kube.client import Kube
from flows.kube.wait import wait_rolled_out
from flows.ledger import TERMINAL, Ledger, Phase, WorkloadSnapshot
from flows.progress import read_ledger, save_ledger
from flows.render import candidate_name, is_twin
from flows.spec import HandoffSpec

RESTORE_S = 300.0


def rollback(kube: Kube, spec: HandoffSpec, *, cause: str) -> Ledger | None:
    """Restore the pre-handoff state; returns the final ledger, or None if none was found."""
    ledger = read_ledger(kube, spec)
    if ledger is None or ledger.phase in TERMINAL:
        return ledger
    if ledger.phase is not Phase.ROLLING_BACK:
        ledger = save_ledger(kube, spec, ledger.to(Phase.ROLLING_BACK, cause=cause[:2000]))
    problems: list[str] = []
    for workload in ledger.snapshot.workloads:
        _restore_workload(kube, spec, workload, problems)
    _restore_selector(kube, spec, ledger)
    _undo_candidate(kube, spec, ledger)
    service = read.read_service(kube, spec.namespace, spec.service)
    write.record_event(
        kube,
        namespace=spec.namespace,
        kind="Service",
        name=spec.service,
        uid=service.uid,
        reason="HandoffRolledBack",
        warning=True,
        message=f"handoff {ledger.handoff_id} rolled back: {cause}"[:1000],
    )
    note = f"{cause}; rollback problems: {'; '.join(problems)}" if problems else cause
    return save_ledger(kube, spec, ledger.to(Phase.ROLLED_BACK, cause=note[:2000]))


def _restore_workload(
    kube: Kube, spec: HandoffSpec, workload: WorkloadSnapshot, problems: list[str]
) -> None:
    current = read.read_deployment(kube, spec.namespace, workload.name)
    if current is None:
        problems.append(f"Deployment {workload.name} no longer exists")
        return
    if workload.spec is not None and current.spec != workload.spec:
        write.replace_deployment_spec(
            kube,
            spec.namespace,
            workload.name,
            workload.spec,
            resource_version=current.resource_version,
        )
    elif current.replicas != workload.replicas:
        write.scale_deployment(kube, spec.namespace, workload.name, workload.replicas)
    try:
        wait_rolled_out(kube, spec.namespace, workload.name, deadline_s=RESTORE_S)
    except HandoffError as exc:
        problems.append(str(exc))


def _restore_selector(kube: Kube, spec: HandoffSpec, ledger: Ledger) -> None:
    service = read.read_service(kube, spec.namespace, spec.service)
    if service.selector != ledger.snapshot.selector:
        write.patch_service(
            kube,
            spec.namespace,
            spec.service,
            resource_version=service.resource_version,
            selector=(service.selector, ledger.snapshot.selector),
        )


def _undo_candidate(kube: Kube, spec: HandoffSpec, ledger: Ledger) -> None:
    """A twin is removed; a separate candidate goes back to its replica count (kept)."""
    name = candidate_name(spec, ledger.strategy)
    if is_twin(spec, ledger.strategy):
        write.delete_deployment(kube, spec.namespace, name)
        return
    if spec.replaces_live:
        return  # the live Deployment itself was restored above
    candidate = read.read_deployment(kube, spec.namespace, name)
    if candidate is not None and candidate.replicas != ledger.snapshot.candidate_replicas:
        write.scale_deployment(kube, spec.namespace, name, ledger.snapshot.candidate_replicas)
