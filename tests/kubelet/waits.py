"""Waits on the API: a list, then a watch from its resourceVersion, until a predicate
over the namespace's objects holds or the deadline passes (then say what was seen)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client, watch

T = TypeVar("T")
Predicate = Callable[[list[Any]], T | None]


def wait_for(
    list_fn: Callable[..., Any],
    predicate: Predicate[T],
    *,
    timeout_s: float,
    what: str,
    **selectors: str,
) -> T:
    """First truthy ``predicate(objects)``; AssertionError naming ``what`` at the deadline.

    ``selectors`` go to ``list_fn`` and its watch (``namespace=``, ``label_selector=``).
    """
    deadline = time.monotonic() + timeout_s
    listed = list_fn(**selectors)
    objects = {o.metadata.name: o for o in listed.items}
    version = listed.metadata.resource_version
    while (found := predicate(list(objects.values()))) is None or found is False:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"timed out after {timeout_s} s waiting for {what}; "
                f"last seen: {_summary(objects.values())}"
            )
        stream = watch.Watch()
        for event in stream.stream(
            list_fn,
            resource_version=version,
            timeout_seconds=max(1, int(left)),
            **selectors,
        ):
            obj = event["object"]
            version = obj.metadata.resource_version
            if event["type"] == "DELETED":
                objects.pop(obj.metadata.name, None)
            else:
                objects[obj.metadata.name] = obj
            if predicate(list(objects.values())):
                stream.stop()
    return found


def wait_pod(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    check: Callable[[client.V1Pod], bool],
    *,
    timeout_s: float,
    what: str,
) -> client.V1Pod:
    """The pod ``name`` once ``check`` holds for it."""

    def found(pods: list[client.V1Pod]) -> client.V1Pod | None:
        return next((p for p in pods if p.metadata.name == name and check(p)), None)

    return wait_for(
        core.list_namespaced_pod,
        found,
        namespace=namespace,
        timeout_s=timeout_s,
        what=f"pod {namespace}/{name}: {what}",
    )


def is_ready(pod: client.V1Pod) -> bool:
    conditions = (pod.status and pod.status.conditions) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def restart_count(pod: client.V1Pod) -> int:
    statuses = (pod.status and pod.status.container_statuses) or []
    return statuses[0].restart_count if statuses else 0


def waiting_reason(pod: client.V1Pod) -> str | None:
    statuses = (pod.status and pod.status.container_statuses) or []
    waiting = statuses[0].state.waiting if statuses and statuses[0].state else None
    return waiting.reason if waiting else None


def _summary(objects: Any) -> str:
    parts = []
    for obj in objects:
        status = getattr(obj, "status", None)
        phase = getattr(status, "phase", None)
        statuses = getattr(status, "container_statuses", None) or []
        states = [
            (s.name, s.restart_count, s.state.to_dict() if s.state else None) for s in statuses
        ]
        parts.append(f"{obj.metadata.name} phase={phase} containers={states}")
    return "; ".join(parts) or "nothing"
