"""Pod, Deployment and Service bodies for the kubelet tests (API-shaped dicts)."""

from __future__ import annotations

from typing import Any

Body = dict[str, Any]
PORT = 8080
CODER_ARGS = ["--w", "/mnt/models/coder-14b-fp16", "--p", str(PORT)]


def container(
    image: str,
    *,
    gpus: int = 0,
    args: list[str] | None = None,
    readiness_path: str | None = "/health",
) -> Body:
    body: Body = {
        "name": "server",
        "image": image,
        "args": args or [],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
    }
    if gpus:
        body["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if readiness_path:
        body["readinessProbe"] = probe(readiness_path, failures=1)
    return body


def probe(path: str, *, failures: int) -> Body:
    """An HTTP probe on the named port, every second."""
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": 1,
        "failureThreshold": failures,
    }


def pod_spec(
    main: Body,
    *,
    runtime_class: str | None = None,
    node_name: str | None = None,
    grace_s: int = 5,
) -> Body:
    spec: Body = {
        "containers": [main],
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": grace_s,
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if node_name:
        spec["nodeName"] = node_name
    return spec


def pod(name: str, spec: Body, labels: dict[str, str] | None = None) -> Body:
    metadata = {"name": name, "labels": labels or {"app": name}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def deployment(name: str, spec: Body, *, replicas: int = 1) -> Body:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def service(name: str, selector: dict[str, str]) -> Body:
    ports = [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": PORT}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": selector, "ports": ports},
    }
