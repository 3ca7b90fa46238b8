"""The command lines a pod's containers run, as its spec says: what a server's own flags
tell the gates (its slots: `flows.baseline`). Apart from the snapshots every step reads,
since only the latency gate asks."""

from __future__ import annotations

from flows.kube.client import Kube, mapped


def container_argv(kube: Kube, namespace: str, pod: str) -> dict[str, list[str]]:
    """Each container's command and args, by its name."""
    with mapped(f"read pod {namespace}/{pod}"):
        raw = kube.api.sanitize_for_serialization(kube.core.read_namespaced_pod(pod, namespace))
    containers = (raw.get("spec") or {}).get("containers") or []
    return {c["name"]: [*(c.get("command") or []), *(c.get("args") or [])] for c in containers}
