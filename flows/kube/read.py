"""Reads: typed snapshots of Services, Deployments, ReplicaSets, pods, nodes, Endpoints,
events, logs."""

from __future__ import annotations

import datetime as dt
from typing import Any

from flows.kube.client import Kube, NotFound, mapped
from flows.kube.objects import (
    REVISION_ANNOTATION,
    DeploymentSnapshot,
    EndpointsSnapshot,
    NodeSnapshot,
    PodSnapshot,
    ReplicaSetSnapshot,
    ServicePort,
    ServiceSnapshot,
    pod_spec_gpus,
)


def _raw(kube: Kube, obj: Any) -> dict[str, Any]:
    raw: dict[str, Any] = kube.api.sanitize_for_serialization(obj)
    return raw


def read_service(kube: Kube, namespace: str, name: str) -> ServiceSnapshot:
    with mapped(f"read Service {namespace}/{name}"):
        raw = _raw(kube, kube.core.read_namespaced_service(name, namespace))
    return service_snapshot(raw)


def list_services(kube: Kube, namespace: str) -> list[ServiceSnapshot]:
    with mapped(f"list Services in {namespace}"):
        items = kube.core.list_namespaced_service(namespace).items
    return [service_snapshot(_raw(kube, item)) for item in items]


def service_snapshot(raw: dict[str, Any]) -> ServiceSnapshot:
    meta, spec = raw["metadata"], raw["spec"]
    return ServiceSnapshot(
        name=meta["name"],
        namespace=meta["namespace"],
        uid=meta["uid"],
        resource_version=meta["resourceVersion"],
        cluster_ip=spec.get("clusterIP"),
        selector=spec.get("selector") or {},
        annotations=meta.get("annotations") or {},
        ports=[
            ServicePort(
                name=p.get("name") or "",
                port=p["port"],
                target_port=p.get("targetPort") or p["port"],
            )
            for p in spec.get("ports") or []
        ],
    )


def deployment_snapshot(raw: dict[str, Any]) -> DeploymentSnapshot:
    meta, spec, status = raw["metadata"], raw["spec"], raw.get("status") or {}
    pod_spec = spec["template"]["spec"]
    return DeploymentSnapshot(
        name=meta["name"],
        namespace=meta["namespace"],
        uid=meta["uid"],
        resource_version=meta["resourceVersion"],
        generation=meta.get("generation", 0),
        observed_generation=status.get("observedGeneration", 0),
        replicas=spec.get("replicas", 1),
        ready_replicas=status.get("readyReplicas", 0),
        updated_replicas=status.get("updatedReplicas", 0),
        total_replicas=status.get("replicas", 0),
        selector=(spec.get("selector") or {}).get("matchLabels") or {},
        template_labels=spec["template"]["metadata"].get("labels") or {},
        gpus_per_pod=pod_spec_gpus(pod_spec),
        images={c["name"]: c["image"] for c in pod_spec["containers"]},
        annotations=meta.get("annotations") or {},
        spec=spec,
    )


def read_deployment(kube: Kube, namespace: str, name: str) -> DeploymentSnapshot | None:
    """The Deployment, or None when it does not exist."""
    try:
        with mapped(f"read Deployment {namespace}/{name}"):
            raw = _raw(kube, kube.apps.read_namespaced_deployment(name, namespace))
    except NotFound:
        return None
    return deployment_snapshot(raw)


def pod_snapshot(raw: dict[str, Any]) -> PodSnapshot:
    meta, spec, status = raw["metadata"], raw["spec"], raw.get("status") or {}
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    statuses = status.get("containerStatuses") or []
    waiting = [(s.get("state") or {}).get("waiting") for s in statuses]
    scheduled = conditions.get("PodScheduled", {})
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "ReplicaSet"]
    return PodSnapshot(
        name=meta["name"],
        namespace=meta.get("namespace") or "",
        uid=meta["uid"],
        labels=meta.get("labels") or {},
        node=spec.get("nodeName"),
        phase=status.get("phase", "Pending"),
        ready=conditions.get("Ready", {}).get("status") == "True",
        terminating=meta.get("deletionTimestamp") is not None,
        gpus=pod_spec_gpus(spec),
        restart_count=sum(s.get("restartCount", 0) for s in statuses),
        owner=owners[0]["name"] if owners else None,
        owner_uid=owners[0]["uid"] if owners else None,
        waiting_reasons=[w["reason"] for w in waiting if w and w.get("reason")],
        waiting_messages=[w["message"] for w in waiting if w and w.get("message")],
        unschedulable=scheduled.get("message")
        if scheduled.get("reason") == "Unschedulable"
        else None,
        last_exit=_last_exit(statuses),
        ip=status.get("podIP"),
        start_s=_start_s(meta, conditions.get("Ready", {})),
    )


def _start_s(meta: dict[str, Any], ready: dict[str, Any]) -> float | None:
    """Creation to Ready, from the API's second-resolution timestamps."""
    created, since = meta.get("creationTimestamp"), ready.get("lastTransitionTime")
    if ready.get("status") != "True" or not created or not since:
        return None
    return max(0.0, (_when(since) - _when(created)).total_seconds())


def _when(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(value)


def replica_set_snapshot(raw: dict[str, Any]) -> ReplicaSetSnapshot:
    meta, status = raw["metadata"], raw.get("status") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    failure = next(
        (
            f"{c.get('reason')}: {c.get('message')}"
            for c in status.get("conditions") or []
            if c["type"] == "ReplicaFailure" and c["status"] == "True"
        ),
        None,
    )
    return ReplicaSetSnapshot(
        name=meta["name"],
        uid=meta["uid"],
        owner_uid=owners[0]["uid"] if owners else None,
        owner=owners[0]["name"] if owners else None,
        revision=(meta.get("annotations") or {}).get(REVISION_ANNOTATION),
        template_hash=(meta.get("labels") or {}).get("pod-template-hash"),
        replicas=(raw.get("spec") or {}).get("replicas", 1),
        created=status.get("replicas", 0),
        failure=failure,
    )


def list_replica_sets(
    kube: Kube, namespace: str, selector: dict[str, str] | None = None
) -> list[ReplicaSetSnapshot]:
    with mapped(f"list ReplicaSets in {namespace}"):
        raw = _raw(
            kube,
            kube.apps.list_namespaced_replica_set(
                namespace, label_selector=_label_selector(selector)
            ),
        )
    return [replica_set_snapshot(r) for r in raw["items"]]


def read_replica_set(kube: Kube, namespace: str, name: str) -> ReplicaSetSnapshot:
    with mapped(f"read ReplicaSet {namespace}/{name}"):
        return replica_set_snapshot(
            _raw(kube, kube.apps.read_namespaced_replica_set(name, namespace))
        )


def read_pod(kube: Kube, namespace: str, name: str) -> PodSnapshot:
    with mapped(f"read pod {namespace}/{name}"):
        return pod_snapshot(_raw(kube, kube.core.read_namespaced_pod(name, namespace)))


def _label_selector(selector: dict[str, str] | None) -> str | None:
    return ",".join(f"{k}={v}" for k, v in (selector or {}).items()) or None


def _last_exit(statuses: list[dict[str, Any]]) -> str | None:
    for s in statuses:
        for state in (s.get("state") or {}, s.get("lastState") or {}):
            term = state.get("terminated")
            if term:
                return f"{term.get('reason', 'Terminated')} (exit code {term.get('exitCode')})"
    return None


def list_pods(
    kube: Kube, namespace: str, selector: dict[str, str] | None = None
) -> list[PodSnapshot]:
    with mapped(f"list pods in {namespace}"):
        raw = _raw(
            kube, kube.core.list_namespaced_pod(namespace, label_selector=_label_selector(selector))
        )
    return [pod_snapshot(p) for p in raw["items"]]


def list_all_pods(kube: Kube) -> list[PodSnapshot]:
    """Every pod in all namespaces (the plan's one look at them)."""
    with mapped("list pods in all namespaces"):
        raw = _raw(kube, kube.core.list_pod_for_all_namespaces())
    return [pod_snapshot(p) for p in raw["items"]]


def list_nodes(kube: Kube) -> list[NodeSnapshot]:
    with mapped("list nodes"):
        raw = _raw(kube, kube.core.list_node())
    nodes = []
    for item in raw["items"]:
        status = item.get("status") or {}
        found = [c for c in status.get("conditions") or [] if c["type"] == "Ready"]
        ready = bool(found) and found[0]["status"] == "True"
        nodes.append(
            NodeSnapshot(
                name=item["metadata"]["name"],
                ready=ready,
                condition=_condition_words(found[0]) if found else "condition missing",
                schedulable=not (item.get("spec") or {}).get("unschedulable", False),
                gpus_allocatable=int((status.get("allocatable") or {}).get("nvidia.com/gpu", 0)),
            )
        )
    return nodes


def _condition_words(condition: dict[str, Any]) -> str:
    """e.g. "Unknown (NodeStatusUnknown: Kubelet stopped posting node status.) since T"."""
    detail = ": ".join(str(condition[k]) for k in ("reason", "message") if condition.get(k))
    since = condition.get("lastTransitionTime")
    return (
        str(condition["status"])
        + (f" ({detail})" if detail else "")
        + (f" since {since}" if since else "")
    )


def read_endpoints(kube: Kube, namespace: str, service: str) -> EndpointsSnapshot:
    try:
        with mapped(f"read Endpoints {namespace}/{service}"):
            raw = _raw(kube, kube.core.read_namespaced_endpoints(service, namespace))
    except NotFound:
        return EndpointsSnapshot(ready_pods=[], not_ready_pods=[])
    return endpoints_snapshot(raw)


def endpoints_snapshot(raw: dict[str, Any]) -> EndpointsSnapshot:
    ready: list[str] = []
    not_ready: list[str] = []
    for subset in raw.get("subsets") or []:
        ready += [_pod_name(a) for a in subset.get("addresses") or []]
        not_ready += [_pod_name(a) for a in subset.get("notReadyAddresses") or []]
    return EndpointsSnapshot(
        name=raw["metadata"]["name"],
        ready_pods=sorted(set(ready)),
        not_ready_pods=sorted(set(not_ready)),
    )


def _pod_name(address: dict[str, Any]) -> str:
    ref = address.get("targetRef") or {}
    return str(ref.get("name") or address.get("ip"))


def recent_events(kube: Kube, namespace: str, name: str, *, limit: int = 10) -> list[str]:
    """The latest events about the object called name, oldest first, one line each."""
    with mapped(f"list events for {namespace}/{name}"):
        raw = _raw(
            kube,
            kube.core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.name={name}"
            ),
        )
    items = sorted(raw["items"], key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return [f"{e.get('type')} {e.get('reason')}: {e.get('message')}" for e in items[-limit:]]


def last_log_lines(
    kube: Kube, namespace: str, pod: str, container: str, *, lines: int = 20, previous: bool = False
) -> str:
    """The pod's last log lines, or a note saying why there are none."""
    try:
        with mapped(f"read logs of {namespace}/{pod}/{container}"):
            return str(
                kube.core.read_namespaced_pod_log(
                    pod, namespace, container=container, tail_lines=lines, previous=previous
                )
            )
    except Exception as exc:  # logs are evidence, never a reason to fail the report
        return f"(no logs: {exc})"
