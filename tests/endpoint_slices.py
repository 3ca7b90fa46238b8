"""EndpointSlices written by hand, as a controller other than Kubernetes' own (a mesh,
say) writes them: routes for a Service that its Endpoints do not show."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from flows.kube.client import Kube
from flows.kube.slices import GROUP, SERVICE_NAME_LABEL, served_version

MANAGER = "mesh.example.com"


def create_slice(
    api: client.ApiClient,
    namespace: str,
    *,
    name: str,
    service: str,
    endpoints: list[dict[str, Any]],
    port_names: tuple[str, ...],
    port: int = 8080,
) -> str:
    """Create the slice in the version the server serves; returns that version."""
    version = served_version(Kube(api))
    assert version is not None, "the control plane serves no EndpointSlices"
    body = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "labels": {
                SERVICE_NAME_LABEL: service,
                "endpointslice.kubernetes.io/managed-by": MANAGER,
            },
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": n, "protocol": "TCP", "port": port} for n in port_names],
    }
    objects = client.CustomObjectsApi(api)
    objects.create_namespaced_custom_object(GROUP, version, namespace, "endpointslices", body)
    return version


def delete_slice(api: client.ApiClient, namespace: str, name: str, version: str) -> None:
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        GROUP, version, namespace, "endpointslices", name
    )
