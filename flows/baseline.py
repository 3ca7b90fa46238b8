"""Which pod the latency gate measures as the live baseline, on which port, and proof that
it is not the candidate.

Observes the live Deployment, its ReplicaSets and pods (by owner, never by label alone:
a candidate or a twin may carry the same labels), and the Service's ports. Decides with
pure functions: the baseline is a ready pod of the ReplicaSet the live Deployment owns
at its current revision; its port is where the Service sends clients on the live pods
(the Service's targetPort resolved against the live pod template), not the candidate's.
Changes nothing.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flows.errors import PermanentError
from flows.kube import read
from flows.kube.argv import container_argv
from flows.kube.client import Kube
from flows.kube.objects import (
    DeploymentSnapshot,
    PodSnapshot,
    ReplicaSetSnapshot,
    ServicePort,
    at_current_revision,
)
from gates.latency.slots import Slots, slots_in_args


class BaselineError(PermanentError):
    """No live pod to compare with, or the one found is not a different workload."""


class PodIdentity(BaseModel):
    """One side of a latency comparison: the pod, the workload it belongs to, the port."""

    model_config = ConfigDict(frozen=True)

    pod: str
    replica_set: str | None
    deployment: str | None
    revision: str | None
    port: int
    node: str | None = None
    gpus: int = 0
    slots: Slots | None = Field(None, description="requests it runs at once, from its flags")

    def describe(self) -> str:
        owner = f"ReplicaSet `{self.replica_set}` (revision {self.revision or '?'})"
        where = f"node `{self.node}`" if self.node else "no node yet"
        slots = f"; {self.slots.count} requests at once ({self.slots.source})" if self.slots else ""
        return (
            f"pod `{self.pod}` of {owner} of Deployment `{self.deployment}`, port {self.port}, "
            f"on {where} ({self.gpus} GPU{'' if self.gpus == 1 else 's'}){slots}"
        )


def describe_design(baseline: PodIdentity, candidate: PodIdentity) -> str:
    """Which measurement design ran and why it suits where the two pods are: the latency
    gate alternates its rounds (never both sides loaded at once), which is what two pods on
    one node need, since they share its CPUs, memory bandwidth and PCIe."""
    alternating = "alternating rounds, never both sides under load at once"
    if baseline.node is None or candidate.node is None:
        return f"{alternating}; where one of the pods runs is not known"
    if baseline.node == candidate.node:
        return (
            f"{alternating}: both pods run on node `{baseline.node}` ({baseline.gpus} + "
            f"{candidate.gpus} GPUs requested; which devices each got is not visible through "
            "the API), so overlapping rounds would slow each other"
        )
    return (
        f"{alternating}; the pods run on different nodes (`{baseline.node}`, "
        f"`{candidate.node}`), so only drift on the cluster is shared, and alternation "
        "spreads it over both"
    )


def decide_baseline_pod(
    live: DeploymentSnapshot, replica_sets: list[ReplicaSetSnapshot], pods: list[PodSnapshot]
) -> tuple[ReplicaSetSnapshot, PodSnapshot] | None:
    """A ready pod of the ReplicaSet `live` controls at its current revision, else None."""
    for rs in at_current_revision(live, replica_sets):
        owned = sorted(
            (p for p in pods if p.owner_uid == rs.uid and p.ready and not p.terminating),
            key=lambda p: p.name,
        )
        if owned:
            return rs, owned[0]
    return None


def resolve_port(target: int | str, template: dict[str, Any]) -> int | None:
    """A Service targetPort on the pods of `template`: a number is itself, a name is the
    container port of that name (None when no container declares it)."""
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    for container in template["spec"].get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target:
                return int(port["containerPort"])
    return None


def compute_live_port(
    *,
    service_ports: list[ServicePort],
    candidate_template: dict[str, Any],
    candidate_port: int,
    live_template: dict[str, Any],
) -> int:
    """The live pods' port that serves what the candidate serves on `candidate_port`:
    through the Service port that reaches the candidate there; without one, the live
    template's only container port."""
    resolved = {
        resolve_port(p.target_port, live_template)
        for p in service_ports
        if resolve_port(p.target_port, candidate_template) == candidate_port
    }
    live = {port for port in resolved if port is not None}
    if len(live) == 1:
        return live.pop()
    declared = {
        int(p["containerPort"])
        for c in live_template["spec"].get("containers") or []
        for p in c.get("ports") or []
    }
    if not live and len(declared) == 1:
        return declared.pop()
    raise BaselineError(
        f"cannot tell which port of the live pods matches the candidate's port {candidate_port}: "
        f"the Service's ports lead to {sorted(p for p in live if p) or 'none'} on the live pods, "
        f"which declare {sorted(declared) or 'no ports'}; name the port the same on both sides "
        "(a named targetPort) so the Service says which one serves"
    )


def find_baseline(
    kube: Kube, namespace: str, live: DeploymentSnapshot, port: int
) -> PodIdentity | None:
    """The baseline pod of `live` (re-read now), or None when none is ready."""
    fresh = read.read_deployment(kube, namespace, live.name)
    if fresh is None:
        return None
    found = decide_baseline_pod(
        fresh,
        read.list_replica_sets(kube, namespace, fresh.selector),
        read.list_pods(kube, namespace, fresh.selector),
    )
    if found is None:
        return None
    rs, pod = found
    return _identity(kube, pod, rs, port)


def identify_pod(kube: Kube, namespace: str, pod: str, port: int) -> PodIdentity:
    """The pod's ReplicaSet and Deployment, from its owner references."""
    snapshot = read.read_pod(kube, namespace, pod)
    owner = read.read_replica_set(kube, namespace, snapshot.owner) if snapshot.owner else None
    return _identity(kube, snapshot, owner, port)


def _identity(
    kube: Kube, pod: PodSnapshot, owner: ReplicaSetSnapshot | None, port: int
) -> PodIdentity:
    """One side as the report names it, the slots its command line sets included (the
    baseline's as much as the candidate's: the gate keeps its levels within the fewer)."""
    return PodIdentity(
        pod=pod.name,
        replica_set=owner.name if owner else None,
        deployment=owner.owner if owner else None,
        revision=owner.revision if owner else None,
        port=port,
        node=pod.node,
        gpus=pod.gpus,
        slots=_slots(kube, pod.namespace, pod.name),
    )


def _slots(kube: Kube, namespace: str, pod: str) -> Slots | None:
    """The slots a container's command line sets (vLLM's `--max-num-seqs`, llama.cpp's
    `--parallel`); None where none says, and the gate keeps its levels."""
    for container, argv in container_argv(kube, namespace, pod).items():
        found = slots_in_args(argv)
        if found is not None:
            count, flag = found
            where = f"`{flag}` of container `{container}`, pod `{pod}`"
            return Slots(count=count, source=where)
    return None


def check_distinct(baseline: PodIdentity, candidate: PodIdentity) -> None:
    """Refuse a comparison of a workload with itself."""
    if baseline.pod == candidate.pod or baseline.deployment == candidate.deployment:
        raise BaselineError(
            f"the latency baseline ({baseline.describe()}) is not a different workload from "
            f"the candidate ({candidate.describe()}): comparing them would prove nothing"
        )
