"""EndpointSlices: what kube-proxy, Cilium and other data planes route a Service by.

The API version is found by discovery (`discovery.k8s.io/v1` from 1.21,
`v1beta1` on 1.20), never by the server's version string. Both versions are read
through the generic objects API, so one snapshot function serves both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from flows.kube.client import Kube, mapped
from flows.kube.objects import EndpointsSnapshot

GROUP = "discovery.k8s.io"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
_PREFERRED = ("v1", "v1beta1")


def served_version(kube: Kube) -> str | None:
    """The EndpointSlice version the server serves (v1 preferred), None without the API."""
    with mapped("discover the API groups"):
        groups = client.ApisApi(kube.api).get_api_versions().groups or []
    for group in groups:
        if group.name == GROUP:
            served = {v.version for v in group.versions or []}
            return next((v for v in _PREFERRED if v in served), None)
    return None


def list_function(kube: Kube, version: str) -> Callable[..., Any]:
    """`list(namespace, **params)` for EndpointSlices of `version`; watchable."""
    objects = client.CustomObjectsApi(kube.api)

    def list_endpoint_slices(namespace: str, **params: Any) -> Any:
        return objects.list_namespaced_custom_object(
            GROUP, version, namespace, "endpointslices", **params
        )

    return list_endpoint_slices


def slice_snapshot(raw: dict[str, Any]) -> EndpointsSnapshot:
    """The pods one slice routes to. `ready` unset means ready (the API's rule)."""
    ready: set[str] = set()
    not_ready: set[str] = set()
    for endpoint in raw.get("endpoints") or []:
        ref = endpoint.get("targetRef") or {}
        name = str(ref.get("name") or ",".join(endpoint.get("addresses") or []))
        is_ready = (endpoint.get("conditions") or {}).get("ready")
        (not_ready if is_ready is False else ready).add(name)
    return EndpointsSnapshot(
        name=raw["metadata"]["name"], ready_pods=sorted(ready), not_ready_pods=sorted(not_ready)
    )
