"""Images for the kubelet tests, pushed to the sandbox registry as CI would push them:
one empty layer and a config whose labels say which simulated server it runs."""

from __future__ import annotations

import gzip
import io
import tarfile

from ociclient import client as oci
from sandbox.publisher import BuiltImage, push_image
from sandbox.simbuild import SimBuild

REVISION = "0" * 40


def push_labelled_image(
    registry_url: str, repository: str, tag: str, build: SimBuild | None
) -> str:
    """Push an image whose config carries ``build``'s labels (none: no server label)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w"):
        pass
    tar = buffer.getvalue()
    labels = {oci.LABEL_REVISION: REVISION, **(build.labels() if build else {})}
    image = BuiltImage(
        layer=gzip.compress(tar, mtime=0),
        diff_id=oci.sha256_digest(tar),
        created="2026-11-01T00:00:00+00:00",
        labels=labels,
    )
    return push_image(registry_url, repository, tag, image)
