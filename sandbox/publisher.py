"""The simulated CI: build an image from a git commit and push it to a registry.

A build is the tree at the commit (``git archive``, gzipped without timestamps, so the same
commit always gives the same layer) plus a config whose labels carry
``org.opencontainers.image.revision`` (the commit), ``org.opencontainers.image.source``
and the build file's description of the simulated server (``sandbox.simbuild``). The push
is plain httpx against the OCI distribution API: blobs (skipped when present), one manifest
per platform and, for several platforms, an index under the tag.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import git
import httpx
from pydantic import BaseModel

from flows import oci
from sandbox import procs
from sandbox.simbuild import read_build

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


def build_image(git_repo: Path, commit: str, *, source_url: str | None = None) -> BuiltImage:
    """Build ``commit`` of ``git_repo``: its tree as the layer, its build file as labels."""
    repo = git.Repo(git_repo)
    resolved = repo.commit(commit)
    tar = repo.git.archive("--format=tar", resolved.hexsha, stdout_as_string=False)
    labels = {
        oci.LABEL_REVISION: resolved.hexsha,
        oci.LABEL_SOURCE: source_url or Path(git_repo).resolve().as_uri(),
        **read_build(repo, resolved.hexsha).labels(),
    }
    return BuiltImage(
        layer=gzip.compress(tar, mtime=0),
        diff_id=oci.sha256_digest(tar),
        created=resolved.committed_datetime.isoformat(),
        labels=labels,
    )


def publish(
    registry_url: str,
    repository: str,
    tag: str,
    *,
    git_repo: Path,
    commit: str,
    delay_s: float = 0.0,
    source_url: str | None = None,
    platforms: Sequence[str] = ("linux/amd64",),
    media: MediaStyle = "oci",
    auth: httpx.Auth | None = None,
) -> str:
    """Wait ``delay_s`` (CI's build time after a merge), build, push; return the tag's digest."""
    time.sleep(delay_s)
    image = build_image(git_repo, commit, source_url=source_url)
    return push_image(
        registry_url, repository, tag, image, platforms=platforms, media=media, auth=auth
    )


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
    manifest_type, config_type, layer_type, index_type = _TYPES[media]
    with httpx.Client(base_url=registry_url, auth=auth, timeout=30.0) as http:
        layer = _push_blob(http, repository, image.layer)
        entries = []
        for platform in platforms:
            os_name, arch = platform.split("/")[:2]
            config = _push_blob(http, repository, _config_bytes(image, os_name, arch))
            body = {
                "schemaVersion": 2,
                "mediaType": manifest_type,
                "config": {"mediaType": config_type, **config},
                "layers": [{"mediaType": layer_type, **layer}],
            }
            reference = tag if len(platforms) == 1 else None
            digest, size = _put_manifest(http, repository, body, reference)
            platform_field = {"os": os_name, "architecture": arch}
            entries.append(
                {
                    "mediaType": manifest_type,
                    "digest": digest,
                    "size": size,
                    "platform": platform_field,
                }
            )
        if len(platforms) == 1:
            return digest
        index = {"schemaVersion": 2, "mediaType": index_type, "manifests": entries}
        return _put_manifest(http, repository, index, tag)[0]


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


def publish_detached(
    registry_url: str,
    repository: str,
    tag: str,
    *,
    git_repo: Path,
    commit: str,
    delay_s: float,
    log: Path,
) -> procs.ProcessRecord:
    """Publish from a background process that outlives the caller (a CLI returning at once)."""
    argv = [
        sys.executable,
        "-m",
        "sandbox.publisher",
        registry_url,
        repository,
        tag,
        "--git-repo",
        str(git_repo),
        "--commit",
        commit,
        "--delay",
        str(delay_s),
    ]
    return procs.spawn("publisher", argv, log)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.publisher", description=__doc__)
    parser.add_argument("registry_url")
    parser.add_argument("repository")
    parser.add_argument("tag")
    parser.add_argument("--git-repo", type=Path, required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    digest = publish(
        args.registry_url,
        args.repository,
        args.tag,
        git_repo=args.git_repo,
        commit=args.commit,
        delay_s=args.delay,
    )
    print(f"pushed {args.repository}:{args.tag} {digest} (revision {args.commit})", flush=True)


if __name__ == "__main__":
    main()
