"""Did admission refuse a ReplicaSet's pods? Asked of the apiserver, not read from words.

A ReplicaSet that cannot create its pods says so in a ReplicaFailure condition whose
message is free text (a quota, a LimitRange, pod security, a validating webhook each word
it their own way; an etcd timeout reads the same). The status code is what tells a
refusal from a passing failure, so a pod of the ReplicaSet's template is sent with
dryRun=All: admission runs in full and nothing is persisted. 400 (BadRequest: a webhook
that denies), 403 (Forbidden: quota, LimitRange, pod security, a webhook) and 422
(Invalid) are refusals that a retry by the ReplicaSet will not change; any other answer
is not. A 403 counts only when RBAC lets this identity create pods there, else it may be
RBAC's own refusal of the probe, and only when the pods' ServiceAccount exists, else it is
the ServiceAccount admission waiting for it. Needs `create` on pods (never persisted:
dry-run) and `get` on serviceaccounts.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from flows.kube.client import Kube, as_body, mapped

REFUSING = {400: "BadRequest", 403: "Forbidden", 422: "Invalid"}


def admission_refusal(kube: Kube, namespace: str, replica_set: str) -> str | None:
    """'<code> <reason>: <apiserver message>' when admission refuses the ReplicaSet's pods;
    None when a pod of it would be admitted now, or the answer proves nothing."""
    with mapped(f"read ReplicaSet {namespace}/{replica_set}"):
        rs = kube.apps.read_namespaced_replica_set(replica_set, namespace)
    pod = _pod_of(kube, rs)
    try:
        kube.core.create_namespaced_pod(namespace, as_body(pod), dry_run="All")
    except ApiException as exc:
        status = exc.status or 0
        if status not in REFUSING:
            return None
        if status == 403 and (
            not _may_create_pods(kube, namespace) or _service_account_missing(kube, namespace, pod)
        ):
            return None
        body = _status_body(exc)
        reason = body.get("reason") or REFUSING[status]
        return f"{status} {reason}: {body.get('message') or exc.reason}"
    except (Urllib3Error, OSError):  # no answer: nothing proven, the wait goes on
        return None
    return None


def _pod_of(kube: Kube, rs: Any) -> dict[str, Any]:
    """A pod as the ReplicaSet controller would create it (template, owner reference)."""
    template = kube.api.sanitize_for_serialization(rs.spec.template)
    metadata = {
        **(template.get("metadata") or {}),
        "generateName": f"{rs.metadata.name}-",
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": rs.metadata.name,
                "uid": rs.metadata.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def _may_create_pods(kube: Kube, namespace: str) -> bool:
    review = {
        "spec": {
            "resourceAttributes": {"namespace": namespace, "verb": "create", "resource": "pods"}
        }
    }
    with mapped(f"ask whether this identity may create pods in {namespace}"):
        answer = client.AuthorizationV1Api(kube.api).create_self_subject_access_review(
            as_body(review)
        )
    return answer.status is not None and bool(answer.status.allowed)


def _service_account_missing(kube: Kube, namespace: str, pod: dict[str, Any]) -> bool:
    """Admission answers 403 while the pods' ServiceAccount does not exist, which is often
    a moment in a release that creates both: a passing failure. Told by reading it."""
    spec = pod["spec"]
    name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    try:
        kube.core.read_namespaced_service_account(name, namespace)
    except ApiException as exc:
        return bool(exc.status == 404)  # a 403 here proves nothing: the refusal stands
    except (Urllib3Error, OSError):
        return False
    return False


def _status_body(exc: ApiException) -> dict[str, Any]:
    import json

    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
