"""Step 7, swap: point the existing Service at the candidate, and prove it.

Observes the Service; decides the target selector (the candidate Deployment's
selector plus its revision label, so exactly one workload matches); changes it by
one merge patch with a resourceVersion precondition (a 409 re-reads and retries),
never by delete/recreate. Then verifies what clients get: the ClusterIP is the one
in the snapshot, and Endpoints hold only ready candidate pods, before anything
scales down. Idempotent: a Service already on the target selector is only verified.
"""

from __future__ import annotations

from flows.errors import PermanentError
from flows.kube import read, write
from flows.kube.client import Conflict
from flows.kube.objects import EndpointsSnapshot
from flows.kube.wait import wait_endpoints
from flows.ledger import Phase
from flows.progress import HandoffRun
from flows.render import load_manifest, service_selector

ENDPOINTS_S = 60.0
_RETRIES = 5


class SwapFailed(PermanentError):
    """The Service did not end up serving only the candidate."""


def target_selector(run: HandoffRun) -> dict[str, str]:
    return service_selector(load_manifest(run.spec), run.ledger.revision or "")


def swap_selector(run: HandoffRun) -> None:
    if run.reached(Phase.SWAPPED):
        return  # later steps may have narrowed the selector further (a twin's retirement)
    point_service(run, target_selector(run))
    run.advance(Phase.SWAPPED)


def point_service(run: HandoffRun, target: dict[str, str]) -> None:
    """Patch the Service's selector to `target` (409: re-read, retry), then verify it and
    record a SwitchService event. A Service already on `target` is only verified."""
    spec = run.spec
    try:
        service = write.update_service_selector(
            run.kube, spec.namespace, spec.service, target, retries=_RETRIES
        )
    except Conflict as exc:
        raise SwapFailed(f"{exc}; the selector was not switched") from exc
    verify_service(run, target)
    write.record_event(
        run.kube,
        namespace=spec.namespace,
        kind="Service",
        name=spec.service,
        uid=service.uid,
        reason="SwitchService",
        message=f"handoff {run.ledger.handoff_id}: selector {target} (was {service.selector})",
    )


def verify_service(run: HandoffRun, selector: dict[str, str]) -> EndpointsSnapshot:
    """ClusterIP unchanged, and Endpoints list only ready pods matching `selector`."""
    spec = run.spec
    service = read.read_service(run.kube, spec.namespace, spec.service)
    if service.cluster_ip != run.ledger.snapshot.cluster_ip:
        raise SwapFailed(
            f"Service {spec.namespace}/{spec.service} ClusterIP is "
            f"{service.cluster_ip}, expected {run.ledger.snapshot.cluster_ip}: "
            "the Service was recreated by someone else; clients may have failed"
        )
    wanted = {
        p.name
        for p in read.list_pods(run.kube, spec.namespace, selector)
        if p.ready and not p.terminating
    }

    def only_wanted(items: list[EndpointsSnapshot]) -> EndpointsSnapshot | None:
        ep = items[0] if items else None
        if ep and ep.ready_pods and set(ep.ready_pods) <= wanted and not ep.not_ready_pods:
            return ep
        return None

    return wait_endpoints(
        run.kube,
        spec.namespace,
        spec.service,
        decide=only_wanted,
        deadline_s=run.limit(ENDPOINTS_S),
        what=f"Endpoints of {spec.service} to hold only {sorted(wanted)}",
    )
