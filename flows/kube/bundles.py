"""The cluster side of the evidence bundle: the ConfigMap that keeps the bundles of a
namespace's handoffs, and what the pods behind a Service run (for `--verify`).

One ConfigMap per namespace (BUNDLES_CONFIGMAP), one key per recorded handoff, so the
flow's Role grants get/update on that one name only; writes carry its resourceVersion
and re-read on 409 (handoffs of different Services write it in parallel)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from flows.kube.client import Kube, NotFound, as_body, mapped
from flows.kube.write import _dry, _reread_on_conflict

BUNDLES_CONFIGMAP = "handoff-evidence"


def _read(kube: Kube, namespace: str) -> dict[str, Any] | None:
    try:
        with mapped(f"read ConfigMap {namespace}/{BUNDLES_CONFIGMAP}"):
            raw: dict[str, Any] = kube.api.sanitize_for_serialization(
                kube.core.read_namespaced_config_map(BUNDLES_CONFIGMAP, namespace)
            )
    except NotFound:
        return None
    return raw


def read_bundles(kube: Kube, namespace: str) -> dict[str, str]:
    """Every stored bundle of the namespace by key ({} when none was ever stored)."""
    return dict(((_read(kube, namespace) or {}).get("data")) or {})


def store_bundle(
    kube: Kube,
    namespace: str,
    key: str,
    text: str,
    *,
    keep: Callable[[str], bool],
    dry_run: bool = False,
) -> None:
    """Set `key` to `text` in the namespace's bundle ConfigMap (created on first use);
    other keys stay while keep(key) says so (the bundles still named by a history)."""
    what = f"store {key} in ConfigMap {namespace}/{BUNDLES_CONFIGMAP}"

    def attempt() -> None:
        current = _read(kube, namespace)
        if current is None:
            body = {"metadata": {"name": BUNDLES_CONFIGMAP}, "data": {key: text}}
            # A 409 here (another handoff created it first) reads again.
            with mapped(f"create ConfigMap {namespace}/{BUNDLES_CONFIGMAP}"):
                kube.core.create_namespaced_config_map(
                    namespace, as_body(body), dry_run=_dry(kube, dry_run)
                )
            return
        data = {k: v for k, v in (current.get("data") or {}).items() if keep(k)}
        data[key] = text
        meta = {
            "name": BUNDLES_CONFIGMAP,
            "resourceVersion": current["metadata"]["resourceVersion"],
        }
        with mapped(f"update ConfigMap {namespace}/{BUNDLES_CONFIGMAP}"):
            kube.core.replace_namespaced_config_map(
                BUNDLES_CONFIGMAP,
                namespace,
                as_body({"metadata": meta, "data": data}),
                dry_run=_dry(kube, dry_run),
            )

    _reread_on_conflict(attempt, what)


class PodImages(BaseModel):
    """A pod, whether it is ready, its labels and the image ids its containers run."""

    name: str
    ready: bool
    labels: dict[str, str]
    image_ids: list[str]
    images: list[str]


def pods_and_images(kube: Kube, namespace: str, selector: dict[str, str]) -> list[PodImages]:
    """The pods `selector` selects, with what the kubelet reports each container runs."""
    label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    with mapped(f"list pods in {namespace} selected by {label_selector}"):
        raw = kube.api.sanitize_for_serialization(
            kube.core.list_namespaced_pod(namespace, label_selector=label_selector)
        )
    found = []
    for pod in raw["items"]:
        meta, status = pod["metadata"], pod.get("status") or {}
        statuses = status.get("containerStatuses") or []
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []
        )
        found.append(
            PodImages(
                name=meta["name"],
                ready=ready and meta.get("deletionTimestamp") is None,
                labels=meta.get("labels") or {},
                image_ids=[s["imageID"] for s in statuses if s.get("imageID")],
                images=[c["image"] for c in pod["spec"]["containers"]],
            )
        )
    return found
