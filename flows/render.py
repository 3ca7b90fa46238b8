"""Render the candidate Deployment from its manifest: pure, no cluster access.

The manifest keeps its real image names; `images:` overrides repoint them, the
gated container's image is pinned to the checked digest, the pod template gets
the handoff's revision label (so the Service can select exactly this workload
even when labels like `app: candle-vllm` are shared) and the object gets the
handoff's annotation.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from flows.errors import PermanentError
from flows.ledger import REVISION_LABEL
from flows.spec import HandoffSpec

HANDOFF_ID_ANNOTATION = "handoff.dev/id"
TWIN_SUFFIX = "-handoff"
# Through a twin, the twin's and the rewritten live Deployment's pods share the revision:
# this label tells them apart, so the Service can leave the twin before it is removed.
WORKLOAD_LABEL = "handoff.dev/workload"


def is_twin(spec: HandoffSpec, strategy: str | None) -> bool:
    """Side by side while replacing the live Deployment: the gates run on a twin."""
    return spec.replaces_live and strategy == "side-by-side"


def candidate_name(spec: HandoffSpec, strategy: str | None) -> str:
    """The Deployment the candidate's pods are warmed and gated in."""
    name = spec.candidate.deployment
    return f"{name}{TWIN_SUFFIX}" if is_twin(spec, strategy) else name


class ManifestError(PermanentError):
    """The candidate manifest is unreadable or lacks the named Deployment."""


def load_manifest(spec: HandoffSpec) -> dict[str, Any]:
    path: Path = spec.candidate.manifest
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise ManifestError(f"candidate manifest {path}: cannot read it: {exc}") from exc
    for doc in documents:
        if (
            doc.get("kind") == "Deployment"
            and doc.get("metadata", {}).get("name") == spec.candidate.deployment
        ):
            _check_container(spec, doc, path)
            manifest: dict[str, Any] = doc
            return manifest
    raise ManifestError(
        f"candidate manifest {path} has no Deployment named {spec.candidate.deployment!r}; "
        "fix candidate.deployment in the spec or the manifest"
    )


def _check_container(spec: HandoffSpec, doc: dict[str, Any], path: Path) -> None:
    names = [c["name"] for c in doc["spec"]["template"]["spec"]["containers"]]
    if spec.candidate.container not in names:
        raise ManifestError(
            f"Deployment {spec.candidate.deployment} in {path} has no container "
            f"{spec.candidate.container!r} (it has {', '.join(names)}); fix candidate.container"
        )


def split_image(image: str) -> tuple[str, str | None]:
    """('registry/repo', ':tag' or '@sha256:…' or None)."""
    if "@" in image:
        name, digest = image.split("@", 1)
        return name, f"@{digest}"
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon:]
    return image, None


def override_image(spec: HandoffSpec, image: str) -> str:
    name, ref = split_image(image)
    return spec.resolve_image(name) + (ref or "")


def container_of(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    """The container `name` of the manifest's pod template."""
    return next(c for c in manifest["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def unpinned_image(spec: HandoffSpec, manifest: dict[str, Any]) -> str:
    """The candidate container's image as the manifest names it, repointed by the spec:
    what the candidate runs when no image is pinned."""
    return override_image(spec, container_of(manifest, spec.candidate.container)["image"])


def compute_revision(spec: HandoffSpec, manifest: dict[str, Any], pinned: str | None) -> str:
    """A short stable id of what the pods run: the pod template as rendered (images
    repointed, the gated one pinned), without the handoff's own labels. The apply makes
    the Deployment's spec exactly the rendered one, so this is the hash of what runs."""
    template = json.dumps(_with_images(spec, manifest["spec"]["template"], pinned), sort_keys=True)
    return hashlib.sha256(f"{spec.name}\n{template}".encode()).hexdigest()[:10]


def template_sha256(template: dict[str, Any]) -> str:
    """A hash of a pod template as the apiserver stores it (defaults filled in): the
    same while nobody edits it, whatever the Deployment's replicas."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()


def _with_images(spec: HandoffSpec, template: dict[str, Any], pinned: str | None) -> dict[str, Any]:
    """A copy of the pod template with its images as they run."""
    template = copy.deepcopy(template)
    for container in template["spec"]["containers"]:
        if container["name"] == spec.candidate.container and pinned:
            container["image"] = pinned
        else:
            container["image"] = override_image(spec, container["image"])
    return template


def render_candidate(
    spec: HandoffSpec,
    manifest: dict[str, Any],
    *,
    pinned: str | None,
    revision: str,
    replicas: int,
    handoff_id: str,
    twin: bool = False,
) -> dict[str, Any]:
    """The Deployment to apply; a twin has its own name and selects only its revision."""
    body = copy.deepcopy(manifest)
    body["metadata"]["namespace"] = spec.namespace
    body["spec"]["template"] = _with_images(spec, manifest["spec"]["template"], pinned)
    if twin:
        body["metadata"]["name"] += TWIN_SUFFIX
        body["spec"]["selector"]["matchLabels"][REVISION_LABEL] = revision
    if spec.replaces_live:
        body["spec"]["template"]["metadata"].setdefault("labels", {})[WORKLOAD_LABEL] = body[
            "metadata"
        ]["name"]
    body["metadata"].setdefault("annotations", {})[HANDOFF_ID_ANNOTATION] = handoff_id
    body["spec"]["replicas"] = replicas
    body["spec"]["template"]["metadata"].setdefault("labels", {})[REVISION_LABEL] = revision
    return body


def service_selector(manifest: dict[str, Any], revision: str) -> dict[str, str]:
    """What the Service selects after the swap: the Deployment's selector plus the revision."""
    match = manifest["spec"]["selector"].get("matchLabels") or {}
    return {**match, REVISION_LABEL: revision}


# Used when the candidate declares no startupProbe: a generous cold start.
DEFAULT_STARTUP_S = 300.0


def compute_startup_allowance(manifest: dict[str, Any], container: str) -> float:
    """How long the candidate may take to start: its startupProbe's budget, else a default."""
    probe = container_of(manifest, container).get("startupProbe")
    if not probe:
        return DEFAULT_STARTUP_S
    return float(
        probe.get("initialDelaySeconds", 0)
        + probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
    )
