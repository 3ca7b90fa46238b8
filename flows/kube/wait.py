"""Watch-based waits with deadlines; no sleep loops.

Each wait lists once, then follows a watch from that resourceVersion, re-deciding
on every event with a pure function. It gives up at its deadline saying what it
waited for and what it saw last.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from flows.errors import TransientError
from flows.kube.client import Kube, mapped
from flows.kube.objects import PodSnapshot
from flows.kube.read import pod_snapshot

T = TypeVar("T")


class WaitTimedOut(TransientError):
    """A wait reached its deadline; the message says what it waited for and saw."""


def wait_pods(
    kube: Kube,
    namespace: str,
    selector: dict[str, str],
    *,
    decide: Callable[[list[PodSnapshot]], T | None],
    deadline_s: float,
    what: str,
) -> T:
    """Follow the pods matching selector until decide(pods) returns a value."""
    label_selector = ",".join(f"{k}={v}" for k, v in selector.items())
    deadline = time.monotonic() + deadline_s
    pods: dict[str, PodSnapshot] = {}
    while True:
        with mapped(f"list pods {label_selector} in {namespace}"):
            listing = kube.core.list_namespaced_pod(namespace, label_selector=label_selector)
        raw = kube.api.sanitize_for_serialization(listing)
        pods = {p["metadata"]["name"]: pod_snapshot(p) for p in raw["items"]}
        verdict = decide(list(pods.values()))
        if verdict is not None:
            return verdict
        try:
            return _follow(
                kube,
                namespace,
                label_selector,
                raw["metadata"]["resourceVersion"],
                pods,
                decide,
                deadline,
                what,
            )
        except _Restart:
            continue


class _Restart(Exception):
    """The watch expired (410 Gone or closed early): list again."""


def _follow(
    kube: Kube,
    namespace: str,
    label_selector: str,
    resource_version: str,
    pods: dict[str, PodSnapshot],
    decide: Callable[[list[PodSnapshot]], T | None],
    deadline: float,
    what: str,
) -> T:
    w = watch.Watch()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimedOut(f"timed out waiting for {what}; last seen: {_describe(pods)}")
        try:
            stream = w.stream(
                kube.core.list_namespaced_pod,
                namespace,
                label_selector=label_selector,
                resource_version=resource_version,
                timeout_seconds=max(1, int(min(remaining, 30))),
            )
            for event in stream:
                obj: dict[str, Any] = kube.api.sanitize_for_serialization(event["object"])
                resource_version = obj["metadata"]["resourceVersion"]
                if event["type"] == "DELETED":
                    pods.pop(obj["metadata"]["name"], None)
                else:
                    pods[obj["metadata"]["name"]] = pod_snapshot(obj)
                verdict = decide(list(pods.values()))
                if verdict is not None:
                    w.stop()
                    return verdict
                if time.monotonic() >= deadline:
                    break
        except ApiException as exc:
            if exc.status == 410:
                raise _Restart from exc
            raise


def _describe(pods: dict[str, PodSnapshot]) -> str:
    if not pods:
        return "no pods"
    return "; ".join(
        f"{p.name} {p.phase}{' Ready' if p.ready else ''}"
        f"{' (' + ', '.join(p.waiting_reasons) + ')' if p.waiting_reasons else ''}"
        for p in pods.values()
    )
