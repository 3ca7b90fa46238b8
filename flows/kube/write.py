"""Single writes, each idempotent when the cluster already matches, each with a
server-side dry-run (`dry_run=True` sends `dryRun=All`: the apiserver validates and
admits the write, then persists nothing)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from flows.errors import PermanentError
from flows.kube import read
from flows.kube.client import FIELD_MANAGER, Conflict, Kube, NotFound, as_body, mapped
from flows.kube.objects import ServiceSnapshot
from retrypolicy.retry import Retry, with_retries

T = TypeVar("T")

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


def _dry(kube: Kube, dry_run: bool) -> str | None:
    """The dryRun parameter; a real write first passes the run's fence."""
    if not dry_run:
        kube.check_fence()
    return "All" if dry_run else None


def apply_deployment(kube: Kube, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """Make the Deployment's spec exactly body's: server-side apply creates it when it
    is absent; an existing one gets its whole spec replaced (resourceVersion-guarded,
    re-read on 409) and body's labels and annotations merged into its own.

    Not server-side apply onto an existing one: apply removes only the fields its own
    manager set before, so a Deployment made by kubectl (client-side apply), Helm or any
    other tool would keep every field the candidate manifest leaves out, and the pods
    would run a merge of the old spec and the new. Other tools' marks on the object
    (last-applied-configuration, Helm's release labels) stay.
    """
    meta = body["metadata"]
    where = f"Deployment {meta['namespace']}/{meta['name']}"

    def attempt() -> dict[str, Any]:
        try:
            with mapped(f"read {where}"):
                live = kube.apps.read_namespaced_deployment(meta["name"], meta["namespace"])
        except NotFound:
            return _create_deployment(kube, body, dry_run=dry_run)
        current = kube.api.sanitize_for_serialization(live)
        for key in ("labels", "annotations"):
            current["metadata"][key] = {**(current["metadata"].get(key) or {}), **meta.get(key, {})}
        return _put_spec(kube, current, body["spec"], dry_run=dry_run)

    return _reread_on_conflict(attempt, f"replace the spec of {where}")


def _reread_on_conflict(attempt: Callable[[], T], what: str) -> T:
    """A read-modify-write retried by the one policy (retrypolicy/retry.py) while its write
    meets a 409: each try reads afresh, so another writer's change is kept, never
    overwritten. Past the policy's bound the Conflict is raised."""

    def once() -> T:
        try:
            return attempt()
        except Conflict as exc:
            raise Retry(exc) from exc

    try:
        return with_retries(once, what=what)
    except Conflict as exc:
        raise Conflict(f"{what}: the object kept changing under this write ({exc})") from exc


def _create_deployment(kube: Kube, body: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
    meta = body["metadata"]
    with mapped(f"apply Deployment {meta['namespace']}/{meta['name']}"):
        result = kube.apps.patch_namespaced_deployment(
            meta["name"],
            meta["namespace"],
            body,
            field_manager=FIELD_MANAGER,
            force=True,
            dry_run=_dry(kube, dry_run),
            _content_type=APPLY_PATCH,
        )
    raw: dict[str, Any] = kube.api.sanitize_for_serialization(result)
    return raw


def _put_spec(
    kube: Kube, current: dict[str, Any], spec: dict[str, Any], *, dry_run: bool
) -> dict[str, Any]:
    """PUT current (as read, its resourceVersion the precondition) with spec in place."""
    meta = current["metadata"]
    meta.pop("managedFields", None)  # left out, the apiserver keeps and updates them
    body = {**current, "spec": spec}
    body.pop("status", None)
    with mapped(f"replace the spec of Deployment {meta['namespace']}/{meta['name']}"):
        result = kube.apps.replace_namespaced_deployment(
            meta["name"],
            meta["namespace"],
            as_body(body),
            dry_run=_dry(kube, dry_run),
            field_manager=FIELD_MANAGER,
        )
    raw: dict[str, Any] = kube.api.sanitize_for_serialization(result)
    return raw


def scale_deployment(
    kube: Kube,
    namespace: str,
    name: str,
    replicas: int,
    *,
    expected: Collection[int] = (),
    dry_run: bool = False,
) -> None:
    """Set a Deployment's replicas (its scale subresource) to `replicas`, decided from a
    fresh read and preconditioned on that read's resourceVersion: a 409 (changed since)
    reads and decides again. A count already at `replicas` is left; one that is neither
    that nor in `expected` (the counts the caller decided from) is someone else's edit
    and raises ReplicasEdited, never overwritten. A dry-run is sent unread: the
    candidate it asks for may not exist yet (the apiserver answers 404 after RBAC)."""
    where = f"Deployment {namespace}/{name}"
    if dry_run:
        _patch_scale(kube, namespace, name, replicas, resource_version=None, dry_run=True)
        return

    def attempt() -> None:
        found = read.read_deployment(kube, namespace, name)
        if found is None:
            kube.check_fence()  # a run that may no longer write hears that first
            raise NotFound(f"{where}: not found, so not scaled to {replicas}")
        if found.replicas == replicas:
            return
        if found.replicas not in expected:
            raise ReplicasEdited(
                f"{where}: expected {' or '.join(map(str, sorted({*expected, replicas})))} "
                f"replicas (what this handoff decided from, or its target), found "
                f"{found.replicas}: someone else scaled it, and it was not scaled to "
                f"{replicas}. Check that the change was meant, then run the handoff (or "
                "`handoff rollback`) again",
                name=name,
            )
        _patch_scale(
            kube, namespace, name, replicas, resource_version=found.resource_version, dry_run=False
        )

    _reread_on_conflict(attempt, f"scale {where} to {replicas}")


def _patch_scale(
    kube: Kube,
    namespace: str,
    name: str,
    replicas: int,
    *,
    resource_version: str | None,
    dry_run: bool,
) -> None:
    """The scale subresource's resourceVersion is its Deployment's: set, a change to the
    Deployment since that read is a 409."""
    patch: dict[str, Any] = {"spec": {"replicas": replicas}}
    if resource_version is not None:
        patch["metadata"] = {"resourceVersion": resource_version}
    with mapped(f"scale Deployment {namespace}/{name} to {replicas}"):
        kube.apps.patch_namespaced_deployment_scale(
            name,
            namespace,
            patch,
            dry_run=_dry(kube, dry_run),
            _content_type=MERGE_PATCH,
        )


class ReplicasEdited(PermanentError):
    """A Deployment's replica count is not one the handoff decided from: a person's edit."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.object = f"Deployment {name}"  # the key a rollback leaves as it is


def replace_deployment_spec(
    kube: Kube,
    namespace: str,
    name: str,
    spec: dict[str, Any],
    *,
    generation: int,
    dry_run: bool = False,
) -> None:
    """Put back a whole spec (rollback of an in-place handoff), decided from the read of
    `generation`. Each try reads afresh and writes under that read's resourceVersion, so
    a 409 from the controller's status writes (frequent while pods stop) reads again; a
    new generation is a spec change made since: SpecEdited, never overwritten."""
    where = f"Deployment {namespace}/{name}"

    def attempt() -> None:
        with mapped(f"read {where}"):
            current = kube.api.sanitize_for_serialization(
                kube.apps.read_namespaced_deployment(name, namespace)
            )
        found = current["metadata"].get("generation")
        if found != generation:
            raise SpecEdited(
                f"{where}: its spec is at generation {found}, not {generation} that this "
                "rollback decided from: someone changed it since, and it was not put back. "
                "Check that the change was meant, then run `handoff rollback` again"
            )
        _put_spec(kube, current, spec, dry_run=dry_run)

    _reread_on_conflict(attempt, f"put back the spec of {where}")


class SpecEdited(PermanentError):
    """A Deployment's spec changed since the read a rollback decided from."""


def selector_patch(old: dict[str, str], new: dict[str, str]) -> dict[str, str | None]:
    """A JSON merge patch turning selector old into new (removed keys set to null)."""
    return {**{k: None for k in old if k not in new}, **new}


def patch_service(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    resource_version: str | None,
    selector: tuple[dict[str, str], dict[str, str]] | None = None,
    annotations: dict[str, str | None] | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Patch a Service in place (never delete/recreate: that drops the ClusterIP).

    With resource_version the apiserver refuses (409) if the Service changed since
    it was read. selector is (old, new); annotations set, or remove with None.
    """
    patch: dict[str, Any] = {"metadata": {}}
    if resource_version is not None:
        patch["metadata"]["resourceVersion"] = resource_version
    if annotations:
        patch["metadata"]["annotations"] = annotations
    if selector is not None:
        patch["spec"] = {"selector": selector_patch(*selector)}
    with mapped(f"patch Service {namespace}/{name}"):
        result = kube.core.patch_namespaced_service(
            name,
            namespace,
            patch,
            dry_run=_dry(kube, dry_run),
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
        )
    raw: dict[str, Any] = kube.api.sanitize_for_serialization(result)
    return raw


def record_event(
    kube: Kube,
    *,
    namespace: str,
    kind: str,
    name: str,
    uid: str,
    reason: str,
    message: str,
    warning: bool = False,
    dry_run: bool = False,
) -> None:
    """An Event on the object, as `kubectl describe` shows it."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    api_version = "apps/v1" if kind == "Deployment" else "v1"
    body = {
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "involvedObject": {
            "kind": kind,
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "apiVersion": api_version,
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": FIELD_MANAGER},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    with mapped(f"record event {reason} on {kind} {namespace}/{name}"):
        kube.core.create_namespaced_event(namespace, as_body(body), dry_run=_dry(kube, dry_run))


def apply_manifest(kube: Kube, body: dict[str, Any], *, dry_run: bool = False) -> None:
    """Server-side apply of any object (Namespace, PV, Service, …), as `kubectl apply
    --server-side` does; the kind is looked up through API discovery."""
    from kubernetes.dynamic import DynamicClient

    meta = body["metadata"]
    where = f"{meta.get('namespace', '')}/{meta['name']}".lstrip("/")
    with mapped(f"apply {body['kind']} {where}"):
        resource = DynamicClient(kube.api).resources.get(
            api_version=body["apiVersion"], kind=body["kind"]
        )
        resource.server_side_apply(
            body=body,
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            dry_run=_dry(kube, dry_run),
        )


def delete_deployment(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    marked: tuple[str, str] | None = None,
    dry_run: bool = False,
) -> None:
    """Delete a Deployment (its ReplicaSets and pods follow); absent is fine.
    marked: (annotation, value) it must carry, the mark of the handoff that made it: a
    Deployment of that name that is not it (made again by a person since) is left alone
    (WorkloadReplaced). The delete is preconditioned on the uid and
    resourceVersion read, so one replaced or changed in between is never deleted."""

    def attempt() -> None:
        preconditions: dict[str, str] = {}
        if marked is not None and not dry_run:
            found = read.read_deployment(kube, namespace, name)
            if found is None:
                return
            key, value = marked
            if found.annotations.get(key) != value:
                raise WorkloadReplaced(
                    f"Deployment {namespace}/{name}: expected the workload this handoff made "
                    f"(annotation {key}={value}), found {key}="
                    f"{found.annotations.get(key)!r}: someone made it again; it is left as "
                    "it is. Delete it by hand if it should go"
                )
            preconditions = {"uid": found.uid, "resourceVersion": found.resource_version}
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if preconditions:
            body["preconditions"] = preconditions
        try:
            with mapped(f"delete Deployment {namespace}/{name}"):
                kube.apps.delete_namespaced_deployment(
                    name, namespace, body=as_body(body), dry_run=_dry(kube, dry_run)
                )
        except NotFound:
            pass

    # A 409: changed since the read; read again and decide again.
    _reread_on_conflict(attempt, f"delete Deployment {namespace}/{name}")


class WorkloadReplaced(PermanentError):
    """A Deployment of the name the handoff made is another workload now."""


def update_service_annotations(
    kube: Kube,
    namespace: str,
    name: str,
    compute: Callable[[dict[str, str]], dict[str, str | None] | None],
) -> bool:
    """Read-modify-write of a Service's annotations, guarded by resourceVersion.

    compute(current annotations) returns the annotations to set (None values remove),
    or None when nothing needs writing. A 409 re-reads and computes again (the one retry
    policy). Returns whether a write was made; raises Conflict if the Service kept changing.
    """

    def changes(service: ServiceSnapshot) -> dict[str, Any] | None:
        annotations = compute(service.annotations)
        return None if annotations is None else {"annotations": annotations}

    return _read_modify_write(kube, namespace, name, changes)[1]


class SelectorEdited(PermanentError):
    """The Service's selector is not one this handoff decided from: a person's edit."""


def update_service_selector(
    kube: Kube,
    namespace: str,
    name: str,
    target: dict[str, str],
    *,
    expected: Callable[[dict[str, str]], bool],
) -> ServiceSnapshot:
    """Set a Service's selector to exactly `target`, computed from a fresh read and
    guarded by its resourceVersion (a 409 re-reads). `expected` says whether the selector
    read is one the caller decided from (or wrote itself); any other is someone else's
    edit and raises SelectorEdited, never overwritten. Returns the Service as read before
    the write (its selector is the previous one); a Service already on target is left."""

    def changes(service: ServiceSnapshot) -> dict[str, Any] | None:
        if service.selector == target:
            return None
        if not expected(service.selector):
            raise SelectorEdited(
                f"Service {namespace}/{name}: its selector is {service.selector}, which this "
                f"handoff neither read before deciding nor wrote, so it was not set to "
                f"{target}: someone else changed it. Check that the change was meant, then "
                "run the handoff (or `handoff rollback`) again"
            )
        return {"selector": (service.selector, target)}

    return _read_modify_write(kube, namespace, name, changes)[0]


def _read_modify_write(
    kube: Kube,
    namespace: str,
    name: str,
    compute: Callable[[ServiceSnapshot], dict[str, Any] | None],
) -> tuple[ServiceSnapshot, bool]:
    """Patch the Service with compute(fresh read) under that read's resourceVersion; a
    409 reads and computes again. Returns (the Service as read, whether it was written)."""
    from flows.kube.read import read_service

    def attempt() -> tuple[ServiceSnapshot, bool]:
        service = read_service(kube, namespace, name)
        changes = compute(service)
        if changes is None:
            return service, False
        patch_service(kube, namespace, name, resource_version=service.resource_version, **changes)
        return service, True

    return _reread_on_conflict(attempt, f"patch Service {namespace}/{name}")
