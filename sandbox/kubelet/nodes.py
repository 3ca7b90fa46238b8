"""Register the simulated Nodes and keep them Ready.

Without heartbeats the node controller marks a node NotReady after ~40 s (at once
if lastHeartbeatTime is null), taints it and later evicts its pods. So every
HEARTBEAT_S we renew the node's Lease in kube-node-lease and post the Ready
condition with a fresh lastHeartbeatTime, as a real kubelet does.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sandbox.cluster import NodeConfig

KUBELET_VERSION = "v1.20.2"
HEARTBEAT_S = 10.0
LEASE_DURATION_S = 40
GPU_RESOURCE = "nvidia.com/gpu"
GPU_RUNTIME_CLASS = "nvidia"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _conditions(now: str) -> list[dict[str, str]]:
    def cond(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    return [
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]


def node_body(node: NodeConfig, kubelet_port: int) -> dict[str, Any]:
    resources = {"cpu": node.cpu, "memory": node.memory, "pods": str(node.pods)}
    if node.gpus:
        resources[GPU_RESOURCE] = str(node.gpus)
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "handoff.dev/sandbox": "true",
        **({"nvidia.com/gpu.product": node.gpu_product} if node.gpu_product else {}),
        **node.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": node.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "conditions": _conditions(_now()),
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "handoff-sandbox://1",
                "osImage": "handoff sandbox",
                "kernelVersion": "",
                "machineID": node.name,
                "systemUUID": node.name,
                "bootID": node.name,
            },
        },
    }


def register_node(api: client.ApiClient, node: NodeConfig, kubelet_port: int) -> None:
    """Create the Node, or bring an existing one's status up to date."""
    core = client.CoreV1Api(api)
    body = node_body(node, kubelet_port)
    try:
        # The client sends a dict body as it is; its annotation names only the model.
        core.create_node(body)  # type: ignore[arg-type]
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.patch_node(node.name, {"metadata": {"labels": body["metadata"]["labels"]}})
    core.patch_node_status(node.name, {"status": body["status"]})
    heartbeat(api, node.name)


def heartbeat(api: client.ApiClient, node_name: str) -> None:
    """Renew the node's Lease and post its Ready condition."""
    core = client.CoreV1Api(api)
    core.patch_node_status(node_name, {"status": {"conditions": _conditions(_now())}})
    leases = client.CoordinationV1Api(api)
    spec = {
        "holderIdentity": node_name,
        "leaseDurationSeconds": LEASE_DURATION_S,
        "renewTime": _now_micro(),
    }
    try:
        leases.patch_namespaced_lease(node_name, "kube-node-lease", {"spec": spec})
    except ApiException as exc:
        if exc.status != 404:
            raise
        lease = {"metadata": {"name": node_name, "namespace": "kube-node-lease"}, "spec": spec}
        # The client sends a dict body as it is (renewTime keeps its MicroTime form); its
        # annotation names only the model.
        leases.create_namespaced_lease("kube-node-lease", lease)  # type: ignore[arg-type]


class NodeHeartbeat:
    """A daemon thread that heartbeats the given nodes until stopped."""

    def __init__(
        self,
        api: client.ApiClient,
        node_names: list[str],
        interval_s: float = HEARTBEAT_S,
        *,
        cut_off: Callable[[str], bool] = lambda _: False,
    ):
        self._api, self._names, self._interval = api, node_names, interval_s
        self._cut_off = cut_off  # a node cut off from the API server gets no heartbeat
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-heartbeat", daemon=True)
        self.errors: list[str] = []

    def start(self) -> NodeHeartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            for name in self._names:
                if self._cut_off(name):
                    continue
                try:
                    heartbeat(self._api, name)
                except Exception as exc:  # keep beating; a missed beat is retried next round
                    self.errors.append(f"{name}: {exc}")


def ensure_runtime_class(api: client.ApiClient) -> None:
    """The `nvidia` RuntimeClass, as the GPU operator installs it beside GPU nodes.

    Without it the apiserver rejects every pod that names it ("RuntimeClass "nvidia" not
    found"), which the seed's manifests all do.
    """
    body = client.V1RuntimeClass(
        api_version="node.k8s.io/v1",
        kind="RuntimeClass",
        metadata=client.V1ObjectMeta(name=GPU_RUNTIME_CLASS),
        handler=GPU_RUNTIME_CLASS,
    )
    try:
        client.NodeV1Api(api).create_runtime_class(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
