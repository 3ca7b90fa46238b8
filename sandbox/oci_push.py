"""Push a built image to a registry with plain httpx (OCI distribution API).

Blobs are uploaded unless the registry has them (POST, then PUT with the digest), then one
manifest per platform; several platforms get an index under the tag, one platform its
manifest. Manifest requests carry the full Accept list, as docker-registry expects.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Literal

import httpx
from pydantic import BaseModel

from ociclient import client as oci

MediaStyle = Literal["oci", "docker"]
_TYPES = {
    "oci": (oci.OCI_MANIFEST, oci.OCI_CONFIG, oci.OCI_LAYER, oci.OCI_INDEX),
    "docker": (oci.DOCKER_MANIFEST, oci.DOCKER_CONFIG, oci.DOCKER_LAYER, oci.DOCKER_LIST),
}


class BuiltImage(BaseModel):
    """One build's layer and the config fields that vary between builds."""

    layer: bytes
    diff_id: str  # digest of the uncompressed tar, as the config's rootfs lists it
    created: str
    labels: dict[str, str]


def push_image(
    registry_url: str,
    repository: str,
    tag: str,
    image: BuiltImage,
    *,
    platforms: Sequence[str] = ("linux/amd64",),
    media: MediaStyle = "oci",
    auth: httpx.Auth | None = None,
) -> str:
    """Push ``image`` under ``tag``: one manifest, or an index when several platforms."""
    types = _TYPES[media]
    with httpx.Client(base_url=registry_url, auth=auth, timeout=30.0) as http:
        layer = _push_blob(http, repository, image.layer)
        push_one = functools.partial(
            _push_platform, http, repository, image=image, layer=layer, types=types
        )
        if len(platforms) == 1:
            return str(push_one(platform=platforms[0], tag=tag)["digest"])
        entries = [push_one(platform=platform, tag=None) for platform in platforms]
        index = {"schemaVersion": 2, "mediaType": types[3], "manifests": entries}
        return _put_manifest(http, repository, index, tag)[0]


def _push_platform(
    http: httpx.Client,
    repository: str,
    *,
    image: BuiltImage,
    layer: dict[str, object],
    platform: str,
    types: tuple[str, str, str, str],
    tag: str | None,
) -> dict[str, object]:
    """Push one platform's config and manifest; returns its index entry."""
    manifest_type, config_type, layer_type, _ = types
    os_name, arch = platform.split("/")[:2]
    config = _push_blob(http, repository, _config_bytes(image, os_name, arch))
    body = {
        "schemaVersion": 2,
        "mediaType": manifest_type,
        "config": {"mediaType": config_type, **config},
        "layers": [{"mediaType": layer_type, **layer}],
    }
    digest, size = _put_manifest(http, repository, body, tag)
    platform_field = {"os": os_name, "architecture": arch}
    return {"mediaType": manifest_type, "digest": digest, "size": size, "platform": platform_field}


def _config_bytes(image: BuiltImage, os_name: str, arch: str) -> bytes:
    config = {
        "created": image.created,
        "architecture": arch,
        "os": os_name,
        "config": {"Labels": image.labels, "Entrypoint": ["/usr/local/bin/candle-vllm"]},
        "rootfs": {"type": "layers", "diff_ids": [image.diff_id]},
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def _push_blob(http: httpx.Client, repository: str, data: bytes) -> dict[str, object]:
    """Upload unless present (monolithic POST then PUT); returns the descriptor fields."""
    digest = oci.sha256_digest(data)
    descriptor: dict[str, object] = {"digest": digest, "size": len(data)}
    head = http.head(f"/v2/{repository}/blobs/{digest}", headers={"Accept": "*/*"})
    if head.status_code == 200:
        return descriptor
    started = http.post(f"/v2/{repository}/blobs/uploads/", headers={"Accept": "*/*"})
    oci.raise_for_registry_status(started, f"start blob upload to {repository}")
    location = httpx.URL(started.headers["Location"])
    done = http.put(
        http.base_url.join(location).copy_merge_params({"digest": digest}),
        content=data,
        headers={"Content-Type": "application/octet-stream", "Accept": "*/*"},
    )
    oci.raise_for_registry_status(done, f"upload blob {digest} to {repository}")
    return descriptor


def _put_manifest(
    http: httpx.Client, repository: str, body: dict[str, object], tag: str | None
) -> tuple[str, int]:
    data = json.dumps(body, separators=(",", ":")).encode()
    digest = oci.sha256_digest(data)
    response = http.put(
        f"/v2/{repository}/manifests/{tag or digest}",
        content=data,
        headers={"Content-Type": str(body["mediaType"]), "Accept": oci.MANIFEST_ACCEPT},
    )
    oci.raise_for_registry_status(response, f"push manifest {repository}:{tag or digest}")
    return digest, len(data)
