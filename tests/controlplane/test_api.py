"""The sandbox control plane is a real Kubernetes API: Service selector patches keep
the ClusterIP, stale writes get 409, controllers create ReplicaSets and Pods, and the
scheduler counts nvidia.com/gpu from Node allocatable."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sandbox.cluster import NodeConfig
from sandbox.kubelet.nodes import NodeHeartbeat, register_node
from tests.kubelet.objects import deployment, service


def _deployment(name: str, *, replicas: int, gpus: int = 0) -> dict:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    container = {"name": "main", "image": "example.invalid/app:1", "resources": resources}
    spec = {"automountServiceAccountToken": False, "containers": [container]}
    return deployment(name, spec, replicas=replicas)


def test_selector_patch_keeps_cluster_ip(kube_api: client.ApiClient, namespace: str) -> None:
    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    apps.create_namespaced_deployment(namespace, _deployment("old", replicas=0))
    before = core.create_namespaced_service(namespace, service("svc", {"app": "old"}))
    after = core.patch_namespaced_service("svc", namespace, {"spec": {"selector": {"app": "new"}}})
    assert after.spec.cluster_ip == before.spec.cluster_ip
    assert after.spec.selector == {"app": "new"}
    assert after.metadata.resource_version != before.metadata.resource_version


def test_stale_resource_version_conflicts(kube_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    first = core.create_namespaced_service(namespace, service("svc", {"app": "a"}))
    core.patch_namespaced_service("svc", namespace, {"spec": {"selector": {"app": "b"}}})
    stale = {
        "metadata": {"resourceVersion": first.metadata.resource_version},
        "spec": {"selector": {"app": "c"}},
    }
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_service("svc", namespace, stale)
    assert info.value.status == 409
    assert core.read_namespaced_service("svc", namespace).spec.selector == {"app": "b"}


def _wait_for(predicate, *, timeout_s: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_scale_up_creates_replicaset_and_pod(kube_api: client.ApiClient, namespace: str) -> None:
    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    apps.create_namespaced_deployment(namespace, _deployment("web", replicas=0))
    apps.patch_namespaced_deployment_scale("web", namespace, {"spec": {"replicas": 1}})
    replica_sets = _wait_for(
        lambda: apps.list_namespaced_replica_set(namespace).items, timeout_s=30, what="a ReplicaSet"
    )
    assert replica_sets[0].metadata.owner_references[0].name == "web"
    pods = _wait_for(lambda: core.list_namespaced_pod(namespace).items, timeout_s=30, what="a Pod")
    assert pods[0].metadata.labels["app"] == "web"


def test_scheduler_counts_gpus(kube_api: client.ApiClient, namespace: str) -> None:
    """Four one-GPU pods bind to a 4-GPU node; the fifth stays Pending, Unschedulable."""
    node = NodeConfig(name=f"gpu-{namespace[-6:]}", gpus=4, labels={"test-ns": namespace})
    register_node(kube_api, node, kubelet_port=1)
    beat = NodeHeartbeat(kube_api, [node.name], interval_s=5).start()
    core = client.CoreV1Api(kube_api)
    try:
        for i in range(5):
            pod = _deployment(f"g{i}", replicas=1, gpus=1)["spec"]["template"]
            pod["metadata"]["name"] = f"g{i}"
            pod["spec"]["nodeSelector"] = {"test-ns": namespace}
            core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", **pod})

        def settled():  # type: ignore[no-untyped-def]
            pods = core.list_namespaced_pod(namespace).items
            bound = [p for p in pods if p.spec.node_name == node.name]
            pending = [
                p
                for p in pods
                if any(
                    c.type == "PodScheduled" and c.reason == "Unschedulable"
                    for c in (p.status.conditions or [])
                )
            ]
            return (bound, pending) if len(bound) == 4 and len(pending) == 1 else None

        _, pending = _wait_for(settled, timeout_s=60, what="4 bound pods and 1 Unschedulable")
        message = next(c.message for c in pending[0].status.conditions if c.type == "PodScheduled")
        assert "Insufficient nvidia.com/gpu" in message
        assert not beat.errors
    finally:
        beat.stop()
        core.delete_node(node.name)


def test_version_is_1_20_2(kube_api: client.ApiClient) -> None:
    info = client.VersionApi(kube_api).get_code()
    assert info.git_version == "v1.20.2"
