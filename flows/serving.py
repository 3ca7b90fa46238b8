"""What the Service serves now, read from the cluster, and what a new handoff may do
about it.

Observes the Service's EndpointSlices (what kube-proxy routes by; its Endpoints where
the API has no slices) and maps each ready address to its pod, the pod to its
ReplicaSet and that to its Deployment. Decides, purely (`route`): a Service that
already routes only to ready pods of the revision the spec would deploy needs nothing;
one that routes to the spec's `current:` Deployments (or to no ready pod at all) is
handed off; anything else is refused with the numbers, because the plan's picture
(`current:` serves) would be wrong and acting on it could empty the Service.
"""

from __future__ import annotations

import enum
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict

from flows.kube import read, slices
from flows.kube.client import Kube, mapped
from flows.ledger import REVISION_LABEL, ServingWorkload
from flows.spec import HandoffSpec

NO_DEPLOYMENT = "(no Deployment)"


class Serving(BaseModel):
    """Every workload the Service routes to, as observed at one moment."""

    model_config = ConfigDict(frozen=True)

    workloads: list[ServingWorkload]

    @property
    def deployments(self) -> set[str]:
        return {w.deployment for w in self.workloads}

    def line(self) -> str:
        if not self.workloads:
            return "no ready pod"
        return ", ".join(w.line() for w in self.workloads)


def observe(kube: Kube, namespace: str, service: str) -> Serving:
    """The workloads behind the Service's ready addresses, read now."""
    ready = _ready_pods(kube, namespace, service)
    if not ready:
        return Serving(workloads=[])
    pods = {p.name: p for p in read.list_pods(kube, namespace)}
    owners = {rs.name: rs.owner for rs in read.list_replica_sets(kube, namespace)}
    counted: Counter[tuple[str, str | None]] = Counter()
    for name in ready:
        pod = pods.get(name)
        if pod is None:  # gone since the slice was read: it serves no more
            continue
        deployment = owners.get(pod.owner or "") or NO_DEPLOYMENT
        counted[(deployment, pod.labels.get(REVISION_LABEL))] += 1
    return Serving(
        workloads=[
            ServingWorkload(deployment=d, revision=r, ready=n)
            for (d, r), n in sorted(counted.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
        ]
    )


def _ready_pods(kube: Kube, namespace: str, service: str) -> set[str]:
    version = slices.served_version(kube)
    if version is None:
        return set(read.read_endpoints(kube, namespace, service).ready_pods)
    with mapped(f"list the EndpointSlices of Service {namespace}/{service}"):
        raw: dict[str, Any] = kube.api.sanitize_for_serialization(
            slices.list_function(kube, version)(
                namespace, label_selector=f"{slices.SERVICE_NAME_LABEL}={service}"
            )
        )
    return {p for item in raw.get("items") or [] for p in slices.slice_snapshot(item).ready_pods}


class Route(enum.StrEnum):
    FORWARD = "forward"  # the Service serves from `current:` (or nothing): hand it off
    NOTHING_TO_DO = "nothing-to-do"  # it already serves the revision the spec deploys
    REFUSED = "refused"  # it serves something the spec does not describe


class Routing(BaseModel):
    model_config = ConfigDict(frozen=True)

    route: Route
    reason: str


def route(spec: HandoffSpec, serving: Serving, *, candidate_revision: str | None) -> Routing:
    """What a new handoff of `spec` may do, given what the Service serves. Pure.

    candidate_revision is the revision the spec's manifest renders with the image the
    candidate Deployment runs now (None when there is no such Deployment)."""
    where = f"Service {spec.namespace}/{spec.service}"
    final = spec.candidate.deployment  # the Deployment that serves once handed off
    names = serving.deployments
    if not names:
        return Routing(
            route=Route.FORWARD, reason=f"{where} routes to no ready pod: nothing to keep serving"
        )
    revisions = {w.revision for w in serving.workloads}
    if names == {final} and candidate_revision is not None and revisions == {candidate_revision}:
        return Routing(
            route=Route.NOTHING_TO_DO,
            reason=f"{where} already routes only to {serving.line()}, the revision this "
            "spec deploys: nothing to do",
        )
    if names <= set(spec.current):
        return Routing(route=Route.FORWARD, reason=f"{where} routes to {serving.line()}")
    wanted = f"current: {', '.join(spec.current)}; candidate: {final}"
    if final in names:
        rendered = candidate_revision or "(not deployed)"
        advice = (
            f"it serves the candidate Deployment {final} itself, at another revision than "
            f"the spec's manifest renders ({rendered}): applying it at 0 replicas would empty "
            f"the Service. To move {final} to a new revision, name it in `current:` (the "
            "handoff then gates a twin beside it); to hand it back, write a spec whose "
            "candidate is the workload to serve"
        )
    else:
        advice = (
            "the spec's picture of what serves is wrong, and a handoff planned from it "
            "could leave the Service without endpoints: fix `current:` (or the Service's "
            "selector), then run the handoff again"
        )
    return Routing(
        route=Route.REFUSED,
        reason=f"{where} routes to {serving.line()}, but the spec says {wanted}; {advice}. "
        "Nothing was written",
    )
