"""Watch-based waits with deadlines; no sleep loops.

Each wait lists once, then follows a watch from that resourceVersion, re-deciding
on every event with a pure function. It gives up at its deadline saying what it
waited for and what it saw last.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from flows.errors import TransientError
from flows.kube import slices
from flows.kube.client import Kube, mapped
from flows.kube.objects import (
    DeploymentSnapshot,
    EndpointsSnapshot,
    PodSnapshot,
    ReplicaSetSnapshot,
)
from flows.kube.read import (
    deployment_snapshot,
    endpoints_snapshot,
    pod_snapshot,
    replica_set_snapshot,
)

T = TypeVar("T")
S = TypeVar("S")
K = TypeVar("K")


class WaitTimedOut(TransientError):
    """A wait reached its deadline; the message says what it waited for and saw."""


@dataclass(frozen=True)
class Waiter(Generic[S, K]):
    """A wait on one kind of object: how to list it, select the ones wanted (by a
    target K: labels or a name), snapshot one and describe what it saw."""

    list_fn: Callable[[Kube], Callable[..., Any]]
    select: Callable[[K], dict[str, str]]
    snapshot: Callable[[dict[str, Any]], S]
    describe: Callable[[dict[str, S]], str]

    def __call__(
        self,
        kube: Kube,
        namespace: str,
        target: K,
        *,
        decide: Callable[[list[S]], T | None],
        deadline_s: float,
        what: str,
    ) -> T:
        """Follow the objects target selects until decide(objects) returns a value."""
        return watch_until(
            kube,
            self.list_fn(kube),
            namespace,
            snapshot=self.snapshot,
            decide=decide,
            deadline_s=deadline_s,
            what=what,
            describe=self.describe,
            **self.select(target),
        )


def _labelled(selector: dict[str, str]) -> dict[str, str]:
    return {"label_selector": ",".join(f"{k}={v}" for k, v in selector.items())}


def _named(name: str) -> dict[str, str]:
    return {"field_selector": f"metadata.name={name}"}


def _of_service(service: str) -> dict[str, str]:
    return {"label_selector": f"{slices.SERVICE_NAME_LABEL}={service}"}


def _describe_routes(items: dict[str, EndpointsSnapshot]) -> str:
    return (
        "; ".join(
            f"{e.name}: ready {e.ready_pods}, not ready {e.not_ready_pods}" for e in items.values()
        )
        or "none"
    )


def _describe_replica_sets(items: dict[str, ReplicaSetSnapshot]) -> str:
    return (
        "; ".join(f"{r.name} {r.created}/{r.replicas} created" for r in items.values())
        or "no ReplicaSets"
    )


@dataclass(frozen=True)
class _Watch(Generic[S, T]):
    """One wait: what to list and watch, how to snapshot, decide and describe."""

    kube: Kube
    list_fn: Callable[..., Any]
    namespace: str
    selectors: dict[str, str]
    snapshot: Callable[[dict[str, Any]], S]
    decide: Callable[[list[S]], T | None]
    describe: Callable[[dict[str, S]], str]
    what: str


def watch_until(
    kube: Kube,
    list_fn: Callable[..., Any],
    namespace: str,
    *,
    snapshot: Callable[[dict[str, Any]], S],
    decide: Callable[[list[S]], T | None],
    deadline_s: float,
    what: str,
    describe: Callable[[dict[str, S]], str],
    **selectors: str,
) -> T:
    """List once, then follow a watch from that resourceVersion, deciding on every event."""
    spec = _Watch(kube, list_fn, namespace, selectors, snapshot, decide, describe, what)
    deadline = time.monotonic() + deadline_s
    while True:
        with mapped(f"list for {what} in {namespace}"):
            raw = kube.api.sanitize_for_serialization(list_fn(namespace, **selectors))
        items = {i["metadata"]["name"]: snapshot(i) for i in raw["items"]}
        verdict = decide(list(items.values()))
        if verdict is not None:
            return verdict
        try:
            return _follow(spec, raw["metadata"]["resourceVersion"], items, deadline)
        except _Restart:
            continue


class _Restart(Exception):
    """The watch expired (410 Gone) or its stream broke: list again."""


def _follow(spec: _Watch[S, T], resource_version: str, items: dict[str, S], deadline: float) -> T:
    w = watch.Watch()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimedOut(
                f"timed out waiting for {spec.what}; last seen: {spec.describe(items)}"
            )
        try:
            stream = w.stream(
                spec.list_fn,
                spec.namespace,
                resource_version=resource_version,
                timeout_seconds=max(1, int(min(remaining, 30))),
                **spec.selectors,
            )
            for event in stream:
                obj: dict[str, Any] = spec.kube.api.sanitize_for_serialization(event["object"])
                resource_version = obj["metadata"]["resourceVersion"]
                if event["type"] == "DELETED":
                    items.pop(obj["metadata"]["name"], None)
                else:
                    items[obj["metadata"]["name"]] = spec.snapshot(obj)
                verdict = spec.decide(list(items.values()))
                if verdict is not None:
                    w.stop()
                    return verdict
                if time.monotonic() >= deadline:
                    break
        except ApiException as exc:
            if exc.status == 410:
                raise _Restart from exc
            raise
        except (Urllib3Error, OSError) as exc:
            # The stream broke (API server restarted, connection reset): list again,
            # which the one retry policy carries through the outage.
            raise _Restart from exc


def _describe_pods(pods: dict[str, PodSnapshot]) -> str:
    if not pods:
        return "no pods"
    return "; ".join(
        f"{p.name} {p.phase}{' Ready' if p.ready else ''}"
        f"{' (' + ', '.join(p.waiting_reasons) + ')' if p.waiting_reasons else ''}"
        for p in pods.values()
    )


# The pods matching a selector.
wait_pods: Waiter[PodSnapshot, dict[str, str]] = Waiter(
    lambda kube: kube.core.list_namespaced_pod, _labelled, pod_snapshot, _describe_pods
)
# The ReplicaSets matching a selector.
wait_replica_sets: Waiter[ReplicaSetSnapshot, dict[str, str]] = Waiter(
    lambda kube: kube.apps.list_namespaced_replica_set,
    _labelled,
    replica_set_snapshot,
    _describe_replica_sets,
)
# The Service's Endpoints object.
wait_endpoints: Waiter[EndpointsSnapshot, str] = Waiter(
    lambda kube: kube.core.list_namespaced_endpoints, _named, endpoints_snapshot, _describe_routes
)


def wait_endpoint_slices(version: str) -> Waiter[EndpointsSnapshot, str]:
    """Every EndpointSlice of the Service, listed through discovery.k8s.io/`version`."""
    return Waiter(
        lambda kube: slices.list_function(kube, version),
        _of_service,
        slices.slice_snapshot,
        _describe_routes,
    )


def wait_rolled_out(kube: Kube, namespace: str, name: str, *, deadline_s: float) -> None:
    """Until the Deployment's controller has rolled out its current spec: observed the
    latest generation, and every desired replica is updated and Ready (no old pods)."""

    def done(items: list[DeploymentSnapshot]) -> bool | None:
        d = items[0] if items else None
        if d is None or d.observed_generation < d.generation:
            return None
        settled = d.updated_replicas == d.replicas == d.ready_replicas == d.total_replicas
        return True if settled else None

    _deployment(
        kube,
        namespace,
        name,
        decide=done,
        deadline_s=deadline_s,
        what=f"Deployment {namespace}/{name} to roll out",
    )


def _describe_rollout(items: dict[str, DeploymentSnapshot]) -> str:
    return repr(
        [
            d.model_dump(include={"replicas", "ready_replicas", "updated_replicas"})
            for d in items.values()
        ]
    )


_deployment: Waiter[DeploymentSnapshot, str] = Waiter(
    lambda kube: kube.apps.list_namespaced_deployment,
    _named,
    deployment_snapshot,
    _describe_rollout,
)
