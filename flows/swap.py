"""Step 7, swap: point the existing Service at the candidate, and prove it.

Observes the Service; decides the target selector (the candidate Deployment's
selector plus its revision label, so exactly one workload matches); waits, reading
only, until a pod it matches is Ready; changes it by one merge patch with a
resourceVersion precondition (a 409 re-reads and retries), never by delete/recreate.
Then verifies what clients get: the ClusterIP is the one in the snapshot, and the
Service's EndpointSlices (what kube-proxy and other data planes route by) lead to
ready candidate pods and list no other pod, with its Endpoints as a second check,
before anything scales down. Idempotent: a Service already on the target selector is
only verified.
"""

from __future__ import annotations

import os
import time

from flows.errors import PermanentError
from flows.kube import read, slices, write
from flows.kube.client import Conflict
from flows.kube.objects import EndpointsSnapshot, PodSnapshot
from flows.kube.wait import WaitTimedOut, wait_endpoint_slices, wait_endpoints, wait_pods
from flows.ledger import Phase
from flows.render import WORKLOAD_LABEL, service_selector
from flows.run import HandoffRun

ENDPOINTS_S = 60.0
PROXY_SYNC_S = 2.0  # kube-proxy's --iptables-min-sync-period (1 s by default), and a margin


def proxy_sync_s() -> float:
    """How long to wait, once the API shows no EndpointSlice routing to a pod, before
    that pod stops: each node's kube-proxy applies a change up to its min sync period
    after seeing it, and no API shows when it has. HANDOFF_PROXY_SYNC_S overrides."""
    return float(os.environ.get("HANDOFF_PROXY_SYNC_S", PROXY_SYNC_S))


def settle_data_plane() -> None:
    """Give every node's proxy the time to apply the routes just verified."""
    time.sleep(proxy_sync_s())


class SwapFailed(PermanentError):
    """The Service did not end up serving only the candidate."""


def target_selector(run: HandoffRun) -> dict[str, str]:
    return service_selector(run.plan.manifest, run.ledger.revision or "")


def live_only_selector(run: HandoffRun, target: dict[str, str]) -> dict[str, str]:
    """`target` narrowed to the live Deployment's pods: a twin's retirement leaves them."""
    return {**target, WORKLOAD_LABEL: run.spec.candidate.deployment}


def swap_selector(run: HandoffRun) -> None:
    if run.reached(Phase.SWAPPED):
        return  # later steps may have narrowed the selector further (a twin's retirement)
    before = [run.ledger.snapshot.selector, *([run.ledger.pin] if run.ledger.pin else [])]
    point_service(run, target_selector(run), came_from=before)
    run.advance(Phase.SWAPPED)


def point_service(
    run: HandoffRun, target: dict[str, str], *, came_from: list[dict[str, str]]
) -> None:
    """Once a pod matching `target` is ready (read-only until then: a Service is never
    pointed at pods none of which serves), patch the Service's selector to `target`
    (409: re-read, retry), then verify it and record a SwitchService event. A Service
    already on `target` is only verified; one on a selector not in `came_from` (what the
    handoff decided from) was edited meanwhile and is left as it is (SelectorEdited)."""
    spec = run.spec
    try:
        serving_pods(run, target)
    except WaitTimedOut as exc:
        raise SwapFailed(f"{exc}; {_unswitched(run, target)}") from exc
    try:
        service = write.update_service_selector(
            run.kube, spec.namespace, spec.service, target, expected=lambda s: s in came_from
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


def _unswitched(run: HandoffRun, target: dict[str, str]) -> str:
    """What a swap that met no Ready pod left, and what to do next."""
    spec = run.spec
    now = read.read_service(run.kube, spec.namespace, spec.service).selector
    left = (
        "the Service already selected them (a run resumed after its patch)"
        if now == target
        else f"the Service was not switched (its selector is still {now})"
    )
    return (
        f"{left}; the handoff rolls back. Look at why the pods are not Ready "
        f"(`kubectl -n {spec.namespace} describe pods -l "
        f"{','.join(f'{k}={v}' for k, v in target.items())}`: a readiness probe, a restart)"
    )


def serving_pods(run: HandoffRun, selector: dict[str, str]) -> set[str]:
    """The names of the pods `selector` matches that are not terminating, once one of
    them is Ready (a readiness probe that timed out under load may take a moment to
    pass again). WaitTimedOut if none is within ENDPOINTS_S (less what is left of a
    declared outage, in place)."""
    spec = run.spec

    def decide(pods: list[PodSnapshot]) -> set[str] | None:
        running = [p for p in pods if not p.terminating]
        return {p.name for p in running} if any(p.ready for p in running) else None

    return wait_pods(
        run.kube,
        spec.namespace,
        selector,
        decide=decide,
        deadline_s=run.limit(ENDPOINTS_S),
        what=f"a Ready pod matching {selector} for Service {spec.namespace}/{spec.service}",
    )


def verify_service(run: HandoffRun, selector: dict[str, str]) -> None:
    """ClusterIP unchanged; the EndpointSlices, then the Endpoints, route only to ready
    pods matching `selector` (waiting until they do: what clients reach follows them)."""
    spec = run.spec
    service = read.read_service(run.kube, spec.namespace, spec.service)
    if service.cluster_ip != run.ledger.snapshot.cluster_ip:
        raise SwapFailed(
            f"Service {spec.namespace}/{spec.service} ClusterIP is "
            f"{service.cluster_ip}, expected {run.ledger.snapshot.cluster_ip}: "
            "the Service was recreated by someone else; clients may have failed"
        )
    wanted = serving_pods(run, selector)
    what = f"{{}} of Service {spec.namespace}/{spec.service} to route only to {sorted(wanted)}"

    def decide(items: list[EndpointsSnapshot]) -> bool | None:
        if decide_routes_only(items, wanted):
            return True
        _still_selecting(run, selector)
        return None

    version = slices.served_version(run.kube)
    if version is not None:
        wait_endpoint_slices(version)(
            run.kube,
            spec.namespace,
            spec.service,
            decide=decide,
            deadline_s=run.limit(ENDPOINTS_S),
            what=what.format(f"the EndpointSlices ({slices.GROUP}/{version})"),
        )
    wait_endpoints(
        run.kube,
        spec.namespace,
        spec.service,
        decide=decide,
        deadline_s=run.limit(ENDPOINTS_S),
        what=what.format("the Endpoints"),
    )


def _still_selecting(run: HandoffRun, selector: dict[str, str]) -> None:
    """Return while the Service still has `selector`: the routes not there yet are on
    their way. A selector changed meanwhile (a person's edit, during the wait) means the routes
    waited for never come: SwapFailed at once, naming it, rather than at the deadline."""
    spec = run.spec
    now = read.read_service(run.kube, spec.namespace, spec.service).selector
    if now != selector:
        raise SwapFailed(
            f"Service {spec.namespace}/{spec.service} spec.selector: expected {selector}, "
            f"found {now}: changed while the handoff waited for its routes, not by it"
        )


def decide_routes_only(routes: list[EndpointsSnapshot], wanted: set[str]) -> bool | None:
    """True when the routes (Endpoints, or every EndpointSlice) together lead to some
    ready pods and list no pod, ready or not, that is not wanted (a wanted pod listed
    as not ready gets no traffic; any other pod listed means the routes are stale)."""
    ready = {pod for r in routes for pod in r.ready_pods}
    listed = ready | {pod for r in routes for pod in r.not_ready_pods}
    return True if ready and listed <= wanted else None
