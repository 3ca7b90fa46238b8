"""Step 1, plan: read the cluster, choose a strategy, dry-run every write.

Observes, each once: the Service, the current and candidate Deployments, the nodes,
the pods and the candidate manifest (carried in the plan, so every later step works
on the manifest the plan decided on); decides with `flows.capacity` (pure);
validates each write the handoff will make with a server-side dry-run. Writes
nothing, so it is trivially idempotent and safe to run at any time (`handoff plan SPEC`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flows import downtime
from flows.capacity import Decision, NodeGpu, Strategy, compute_gpu_ledger, decide_strategy
from flows.dryrun import DryRun, dry_run, planned_writes
from flows.errors import PermanentError
from flows.kube import read
from flows.kube.client import Kube, NotFound
from flows.kube.objects import (
    DeploymentSnapshot,
    PodSnapshot,
    ReplicaSetSnapshot,
    ServiceSnapshot,
    current_template_hash,
    matches,
    owned_by_deployment,
    pod_spec_gpus,
)
from flows.ledger import Snapshot, WorkloadSnapshot, history_entries, unfinished_in
from flows.render import TWIN_SUFFIX, compute_revision, load_manifest
from flows.serving import Route, Routing, Serving, observe, route
from flows.spec import HandoffSpec


class PlanRefused(PermanentError):
    """The cluster cannot take this handoff as specified; nothing was written."""


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True)

    spec_name: str
    namespace: str
    service: ServiceSnapshot
    current: list[DeploymentSnapshot]
    candidate: DeploymentSnapshot | None
    gpu: list[NodeGpu]
    gpus_per_pod: int
    decision: Decision
    downtime: downtime.Downtime | None
    capacity_wait_s: float = 0.0
    pin_live_selector: dict[str, str] | None
    dry_runs: list[DryRun]
    serving: Serving = Serving(workloads=[])
    routing: Routing = Routing(route=Route.FORWARD, reason="not observed")
    manifest: dict[str, Any] = Field(
        exclude=True, repr=False, description="the candidate Deployment, as read from its file"
    )

    @property
    def downtime_bound_s(self) -> float | None:
        return self.downtime.bound_s if self.downtime else None

    @property
    def strategy(self) -> Strategy | None:
        return self.decision.strategy

    @property
    def nothing_to_do(self) -> str | None:
        """Why a new handoff has nothing to do: the Service already serves its revision."""
        return self.routing.reason if self.routing.route is Route.NOTHING_TO_DO else None

    @property
    def refused(self) -> str | None:
        if self.routing.route is Route.REFUSED:
            return self.routing.reason
        if self.decision.strategy is None:
            return "; ".join(self.decision.reasons)
        failed = [d for d in self.dry_runs if not d.ok]
        if failed:
            return "; ".join(f"dry-run of {d.write} failed: {d.detail}" for d in failed)
        return None

    def snapshot(self, spec: HandoffSpec) -> Snapshot:
        """The state to restore; the live spec too when the handoff will rewrite it."""
        return Snapshot(
            selector=self.service.selector,
            cluster_ip=self.service.cluster_ip,
            workloads=[
                WorkloadSnapshot(
                    name=d.name,
                    replicas=d.replicas,
                    resource_version=d.resource_version,
                    uid=d.uid,
                    generation=d.generation,
                    spec=d.spec if spec.replaces_live else None,
                )
                for d in self.current
            ],
            candidate_existed=self.candidate is not None and not spec.replaces_live,
            candidate_replicas=self.candidate.replicas
            if self.candidate and not spec.replaces_live
            else 0,
            serving=self.serving.workloads,
        )


def read_target_service(kube: Kube, spec: HandoffSpec) -> ServiceSnapshot:
    """The Service the spec moves; a clear refusal when it does not exist."""
    try:
        return read.read_service(kube, spec.namespace, spec.service)
    except NotFound as exc:
        raise PlanRefused(
            f"Service {spec.namespace}/{spec.service} named in {spec.source_file} does not "
            "exist, and it is not recreated by a handoff (a new Service would get a new "
            "ClusterIP): apply the Service's manifest, then run the handoff again"
        ) from exc


def make_plan(kube: Kube, spec: HandoffSpec) -> Plan:
    """Observe, decide, dry-run. Raises only when the cluster cannot be read."""
    service = read_target_service(kube, spec)
    # The audit trail is appended to at the end: an unreadable one stops the run now.
    history_entries(service.annotations, where=f"Service {spec.namespace}/{spec.service}")
    current = [_require(kube, spec, name) for name in spec.current]
    # Replacing the live Deployment, the candidate that may already run is its twin.
    twin = spec.candidate.deployment + TWIN_SUFFIX
    candidate = read.read_deployment(
        kube, spec.namespace, twin if spec.replaces_live else spec.candidate.deployment
    )
    manifest = load_manifest(spec)
    per_pod = pod_spec_gpus(manifest["spec"]["template"]["spec"])
    every_pod = read.list_all_pods(kube)
    pods = [p for p in every_pod if p.node]  # bound to a node: they hold its GPUs
    ns_pods = [
        p
        for p in pods
        if any(
            owned_by_deployment(p, d.name) for d in [*current, *([candidate] if candidate else [])]
        )
    ]
    gpu = compute_gpu_ledger(read.list_nodes(kube), pods)
    decision = decide_strategy(
        same_deployment=spec.replaces_live,
        per_pod=per_pod,
        preview=spec.candidate.preview_replicas,
        target=spec.candidate.replicas,
        ledger=gpu,
        current_pods=[p for p in ns_pods if any(owned_by_deployment(p, d.name) for d in current)],
        candidate_pods=[p for p in ns_pods if candidate and owned_by_deployment(p, candidate.name)],
    )
    # What serves now decides, not what the spec assumes: a rerun of a finished
    # handoff has nothing to do, and a Service serving something else is refused.
    resumed = unfinished_in(service.annotations)
    serving = observe(kube, spec.namespace, spec.service)
    if resumed is not None and resumed.spec == spec.name:
        routing = Routing(route=Route.FORWARD, reason=f"resuming handoff {resumed.handoff_id}")
    else:
        final = current[0] if spec.replaces_live else candidate
        routing = route(spec, serving, candidate_revision=_deployed_revision(spec, manifest, final))
    # Side by side or in place, the candidate's pods must not join the Service before
    # the gates and the swap: a selector they would match is narrowed first.
    pin: dict[str, str] | None = None
    if resumed is not None and resumed.spec == spec.name:
        pin = resumed.pin  # in place, the live Deployment may carry the candidate's template
    elif decision.strategy and routing.route is Route.FORWARD:
        replica_sets = read.list_replica_sets(kube, spec.namespace)
        pin = _live_selector_pin(spec, service, current, manifest, every_pod, replica_sets)
    return Plan(
        spec_name=spec.name,
        service=service,
        namespace=spec.namespace,
        current=current,
        capacity_wait_s=spec.candidate.capacity_wait_s,
        candidate=candidate,
        gpu=gpu,
        gpus_per_pod=per_pod,
        decision=decision,
        downtime=_declare_downtime(kube, spec, manifest, current, ns_pods)
        if decision.strategy is Strategy.IN_PLACE
        else None,
        pin_live_selector=pin,
        serving=serving,
        routing=routing,
        dry_runs=dry_run(
            planned_writes(
                kube,
                spec,
                service=service,
                current=current,
                manifest=manifest,
                strategy=decision.strategy,
            )
        )
        if decision.strategy and routing.route is Route.FORWARD
        else [],
        manifest=manifest,
    )


def _deployed_revision(
    spec: HandoffSpec, manifest: dict[str, Any], final: DeploymentSnapshot | None
) -> str | None:
    """The revision the spec's manifest renders with the image the Deployment that ends
    up serving runs now: its pods carry this revision label exactly when they run the
    manifest's template with that image. None when it does not exist."""
    if final is None:
        return None
    image = final.images.get(spec.candidate.container)
    return None if image is None else compute_revision(spec, manifest, image)


def _require(kube: Kube, spec: HandoffSpec, name: str) -> DeploymentSnapshot:
    found = read.read_deployment(kube, spec.namespace, name)
    if found is None:
        raise PlanRefused(
            f"current Deployment {spec.namespace}/{name} named in {spec.source_file} does not "
            "exist; fix `current:` or apply the workload the Service serves from"
        )
    return found


def _live_selector_pin(
    spec: HandoffSpec,
    service: ServiceSnapshot,
    current: list[DeploymentSnapshot],
    manifest: dict[str, Any],
    pods: list[PodSnapshot],
    replica_sets: list[ReplicaSetSnapshot],
) -> dict[str, str] | None:
    """If the candidate's pods would match the live selector, the selector narrowed to
    the pod-template-hash of the live Deployment's current ReplicaSet, so the Service
    never selects both workloads. The hash is the ReplicaSet's, not its pods': right
    after a rollback the ReplicaSet is back before its pods are. Refused while the
    Deployment controller has not observed the live spec (its revision is stale) or
    live pods of another template still serve (a rollout in progress)."""
    labels = manifest["spec"]["template"]["metadata"].get("labels") or {}
    if not matches(service.selector, labels):
        return None
    for d in current:
        if d.observed_generation < d.generation:
            raise PlanRefused(
                f"the candidate's pod labels {labels} match Service {spec.service}'s selector "
                f"{service.selector}, and Deployment {spec.namespace}/{d.name}'s controller "
                f"has not observed generation {d.generation} (observed "
                f"{d.observed_generation}), so the pod-template-hash to narrow the selector to "
                f"is not known yet: wait for `kubectl -n {spec.namespace} rollout status "
                f"deployment/{d.name}`, then run the handoff again"
            )
    serving = current_template_hash(current[0], replica_sets) if len(current) == 1 else None
    running = {
        p.labels.get("pod-template-hash")
        for d in current
        for p in pods
        if p.namespace == spec.namespace
        and not p.terminating  # a Service does not route to it
        and all(p.labels.get(k) == v for k, v in d.selector.items())
        and owned_by_deployment(p, d.name)
    }
    if serving is None or not running <= {serving}:
        raise PlanRefused(
            f"the candidate's pod labels {labels} match Service {spec.service}'s selector "
            f"{service.selector}, and the live workload has no one pod-template-hash to narrow "
            f"it to (current ReplicaSet: {serving or 'not one'}; live "
            f"pods: {sorted(h or '?' for h in running) or 'none'}): let the live Deployment's "
            "rollout finish, or give the candidate a label the live selector does not match"
        )
    return {**service.selector, "pod-template-hash": serving}


def _declare_downtime(
    kube: Kube,
    spec: HandoffSpec,
    manifest: dict[str, Any],
    current: list[DeploymentSnapshot],
    pods: list[PodSnapshot],
) -> downtime.Downtime:
    """In place: the outage from its parts, with this image's earlier starts recorded in
    the namespace's history and the live pods' own starts."""
    history = [
        e for s in read.list_services(kube, spec.namespace) for e in history_entries(s.annotations)
    ]
    repository = spec.resolve_image(spec.image.repository)
    live = [p for p in pods if any(owned_by_deployment(p, d.name) for d in current)]
    return downtime.declare(
        spec,
        manifest,
        [d.spec["template"]["spec"] for d in current],
        candidate_starts=downtime.recorded_starts(history, repository),
        live_starts=[p.start_s for p in live if p.start_s is not None],
    )
