"""coordination.k8s.io/v1 Leases: read, create, replace, delete one, typed.

Like every flows.kube call, each request is retried by the one policy (RetryingApiClient)
and its errors are mapped to flows.errors. Lease writes do not pass the run's fence:
they are how a run holds, renews and gives back the very Lease the fence checks.
"""

from __future__ import annotations

from typing import Any

from flows.kube.client import Kube, mapped
from flows.kube.objects import LeaseSnapshot


def read_lease(
    kube: Kube, namespace: str, name: str, *, timeout_s: float | None = None
) -> LeaseSnapshot:
    """The Lease; NotFound when there is none."""
    with mapped(f"read Lease {namespace}/{name}"):
        lease = kube.coordination.read_namespaced_lease(name, namespace, **_timeout(timeout_s))
    spec = lease.spec
    return LeaseSnapshot(
        name=name,
        namespace=namespace,
        resource_version=lease.metadata.resource_version,
        holder=spec.holder_identity,
        duration_s=spec.lease_duration_seconds,
        renew_time=spec.renew_time,
        transitions=spec.lease_transitions or 0,
        body=kube.api.sanitize_for_serialization(lease),
    )


def create_lease(kube: Kube, namespace: str, body: dict[str, Any]) -> None:
    """Create the Lease; Conflict when one by that name exists."""
    with mapped(f"create Lease {namespace}/{body['metadata']['name']}"):
        kube.coordination.create_namespaced_lease(namespace, body)


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
        kube.coordination.replace_namespaced_lease(name, namespace, body, **_timeout(timeout_s))


def delete_lease(kube: Kube, namespace: str, name: str, *, resource_version: str) -> None:
    """Delete the Lease if it is still at resource_version (else Conflict)."""
    with mapped(f"delete Lease {namespace}/{name}"):
        kube.coordination.delete_namespaced_lease(
            name, namespace, body={"preconditions": {"resourceVersion": resource_version}}
        )


def _timeout(seconds: float | None) -> dict[str, float]:
    return {} if seconds is None else {"_request_timeout": seconds}
