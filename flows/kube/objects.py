"""Typed snapshots of the Kubernetes objects a handoff reads.

Raw API bodies stop here: everything past `flows.kube` sees these frozen models.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

GPU = "nvidia.com/gpu"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"


class _Snapshot(BaseModel):
    model_config = ConfigDict(frozen=True)


class ServicePort(_Snapshot):
    name: str = ""
    port: int
    target_port: int | str = Field(description="a number, or the name of a container port")


class ServiceSnapshot(_Snapshot):
    name: str
    namespace: str
    uid: str
    resource_version: str
    cluster_ip: str | None
    selector: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    ports: list[ServicePort] = Field(default_factory=list)


class DeploymentSnapshot(_Snapshot):
    name: str
    namespace: str
    uid: str
    resource_version: str
    generation: int
    observed_generation: int
    replicas: int
    ready_replicas: int
    updated_replicas: int
    total_replicas: int = Field(0, description="status.replicas: pods of every ReplicaSet")
    selector: dict[str, str]
    template_labels: dict[str, str]
    gpus_per_pod: int
    images: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    spec: dict[str, Any] = Field(description="the whole spec, for restoring it on rollback")

    @property
    def revision(self) -> str | None:
        """The rollout revision the Deployment controller gave its current ReplicaSet."""
        return self.annotations.get(REVISION_ANNOTATION)


class ReplicaSetSnapshot(_Snapshot):
    name: str
    uid: str
    owner_uid: str | None = Field(description="uid of the controlling Deployment, if any")
    owner: str | None = Field(description="name of the controlling Deployment, if any")
    revision: str | None
    template_hash: str | None = Field(None, description="the pod-template-hash its pods carry")
    replicas: int = Field(description="spec.replicas: pods wanted")
    created: int = Field(description="status.replicas: pods that exist")
    failure: str | None = Field(
        None, description="ReplicaFailure condition: why pods could not be created"
    )


class PodSnapshot(_Snapshot):
    name: str
    namespace: str = ""
    uid: str
    labels: dict[str, str]
    node: str | None
    phase: str
    ready: bool
    terminating: bool
    gpus: int
    restart_count: int
    owner: str | None = Field(description="name of the owning ReplicaSet, if any")
    owner_uid: str | None = Field(None, description="uid of the owning ReplicaSet, if any")
    waiting_reasons: list[str] = Field(default_factory=list)
    waiting_messages: list[str] = Field(default_factory=list)
    unschedulable: str | None = Field(None, description="scheduler's message when Unschedulable")
    last_exit: str | None = Field(None, description="reason and code of the last termination")
    ip: str | None = None
    start_s: float | None = Field(None, description="seconds from creation to Ready, if Ready")


class LeaseSnapshot(_Snapshot):
    name: str
    namespace: str
    resource_version: str
    holder: str | None = Field(description="spec.holderIdentity, as written")
    duration_s: int | None = Field(description="spec.leaseDurationSeconds")
    renew_time: dt.datetime | None = Field(description="spec.renewTime")
    transitions: int = Field(description="spec.leaseTransitions (0 when unset)")
    body: dict[str, Any] = Field(description="the whole object, for a replace that keeps it")


class NodeSnapshot(_Snapshot):
    name: str
    ready: bool
    schedulable: bool
    gpus_allocatable: int
    condition: str = Field("", description="the Ready condition in words, e.g. for a report")


class EndpointsSnapshot(_Snapshot):
    """An Endpoints object or one EndpointSlice: which pods it routes to."""

    name: str = ""
    ready_pods: list[str]
    not_ready_pods: list[str]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels form) selects these labels."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def container_gpus(container: dict[str, Any]) -> int:
    resources = container.get("resources") or {}
    for key in ("requests", "limits"):
        value = (resources.get(key) or {}).get(GPU)
        if value is not None:
            return int(value)
    return 0


def pod_spec_gpus(pod_spec: dict[str, Any]) -> int:
    return sum(container_gpus(c) for c in pod_spec.get("containers") or [])


def at_current_revision(
    live: DeploymentSnapshot, replica_sets: list[ReplicaSetSnapshot]
) -> list[ReplicaSetSnapshot]:
    """The ReplicaSets `live` controls at its current rollout revision (one, once settled)."""
    return [rs for rs in replica_sets if rs.owner_uid == live.uid and rs.revision == live.revision]


def current_template_hash(
    live: DeploymentSnapshot, replica_sets: list[ReplicaSetSnapshot]
) -> str | None:
    """The pod-template-hash of `live`'s current ReplicaSet, the one its pods have or will
    have. None while it cannot be known: the controller has not observed the latest
    generation (the revision still names the old ReplicaSet), or there is no single one."""
    if live.observed_generation < live.generation:
        return None
    hashes = {rs.template_hash for rs in at_current_revision(live, replica_sets)}
    return hashes.pop() if len(hashes) == 1 else None


def owned_by_deployment(pod: PodSnapshot, deployment: str) -> bool:
    """The pod belongs to a ReplicaSet of that Deployment (named `<deployment>-<hash>`)."""
    return pod.owner is not None and pod.owner.rsplit("-", 1)[0] == deployment
