"""coordination.k8s.io/v1 Leases: read, create, replace, delete one, typed.

Like every flows.kube call, each request is retried by the one policy (RetryingApiClient)
and its errors are mapped to flows.errors. Lease writes do not pass the run's fence:
they are how a run holds, renews and gives back the very Lease the fence checks.
"""

from __future__ import annotations

from typing import Any

from flows.kube.client import Kube, as_body, mapped
from flows.kube.objects import LeaseSnapshot


def read_lease(
    kube: Kube, namespace: str, name: str, *, timeout_s: float | None = None
) -> LeaseSnapshot:
    """The Lease; NotFound when there is none."""
    with mapped(f"read Lease {namespace}/{name}"):
        lease = kube.coordination.read_namespaced_lease(name, namespace, _request_timeout=timeout_s)
    raw: dict[str, Any] = kube.api.sanitize_for_serialization(lease)
    spec = raw.get("spec") or {}
    return LeaseSnapshot(
        name=name,
        namespace=namespace,
        resource_version=raw["metadata"]["resourceVersion"],
        holder=spec.get("holderIdentity"),
        duration_s=spec.get("leaseDurationSeconds"),
        renew_time=spec.get("renewTime"),
        transitions=spec.get("leaseTransitions") or 0,
        body=raw,
    )


def create_lease(kube: Kube, namespace: str, body: dict[str, Any]) -> None:
    """Create the Lease; Conflict when one by that name exists."""
    with mapped(f"create Lease {namespace}/{body['metadata']['name']}"):
        kube.coordination.create_namespaced_lease(namespace, as_body(body))


def replace_lease(
    kube: Kube,
    namespace: str,
    body: dict[str, Any],
    *,
    action: str = "replace",
    timeout_s: float | None = None,
) -> None:
    """Replace the Lease with body; Conflict when its resourceVersion is not the live one."""
    name = body["metadata"]["name"]
    with mapped(f"{action} Lease {namespace}/{name}"):
        kube.coordination.replace_namespaced_lease(
            name, namespace, as_body(body), _request_timeout=timeout_s
        )


def delete_lease(kube: Kube, namespace: str, name: str, *, resource_version: str) -> None:
    """Delete the Lease if it is still at resource_version (else Conflict)."""
    with mapped(f"delete Lease {namespace}/{name}"):
        kube.coordination.delete_namespaced_lease(
            name,
            namespace,
            body=as_body({"preconditions": {"resourceVersion": resource_version}}),
        )
