"""Image pulls as a node's container runtime (dockershim on 1.20) reports them.

A reference resolves only against the sandbox registry or another loopback registry (a
fault front to it); any other registry host fails as an unresolvable name would (it is
never dialled). Failures carry the reason and message
a real kubelet shows (ErrImagePull, InvalidImageName). Pulled images are cached per
node process, so ``IfNotPresent`` skips the registry as a real node does.
"""

from __future__ import annotations

import threading

from pydantic import BaseModel, ConfigDict

from ociclient.client import RegistryClient
from ociclient.errors import ImageNotFound, RegistryAuthError, RegistryError, RegistryUnavailable
from ociclient.ref import ImageRef
from sandbox.flowimage import ROOT_LABEL
from sandbox.simbuild import SimBuild

_DAEMON = "rpc error: code = Unknown desc = Error response from daemon"


class PulledImage(BaseModel):
    """An image on the node: what the container status reports and what it runs."""

    model_config = ConfigDict(frozen=True)

    image: str  # as the pod spec names it
    image_id: str  # docker-pullable://registry/repository@sha256:…
    build: SimBuild | None  # None: an image CI did not build (no server label)
    flow_root: str | None = None  # the flow's image: where the project lives in it


class ImagePullError(Exception):
    """A pull failed; ``reason`` is the container's waiting reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


def parse_image(image: str) -> ImageRef:
    """Parse as the kubelet does, adding the default tag `latest` when none is given."""
    try:
        ref = ImageRef.parse(image)
    except ValueError:
        try:
            ref = ImageRef.parse(f"{image}:latest")
        except ValueError:
            raise ImagePullError(
                "InvalidImageName",
                f'Failed to apply default image tag "{image}": couldn\'t parse image '
                f'reference "{image}": invalid reference format',
            ) from None
    return ref


class ImageStore:
    """The node's image cache in front of the sandbox registry."""

    def __init__(self, registry_url: str) -> None:
        self.registry_url = registry_url.rstrip("/")
        self.host = self.registry_url.split("://", 1)[-1]
        self._lock = threading.Lock()
        self._present: dict[str, PulledImage] = {}

    def present(self, image: str) -> PulledImage | None:
        with self._lock:
            return self._present.get(image)

    def pull(self, image: str) -> PulledImage:
        """Resolve ``image`` in the sandbox registry and read its labels, or raise."""
        ref = parse_image(image)
        source = self._source(ref.registry)
        if source is None:
            raise ImagePullError(
                "ErrImagePull",
                f'{_DAEMON}: Get "https://{ref.registry}/v2/": dial tcp: lookup '
                f"{ref.registry}: no such host (sandbox nodes pull only from {self.host})",
            )
        try:
            with RegistryClient(source, timeout_s=5.0) as registry:
                info = registry.read_image(ref.repository, ref.reference)
        except RegistryError as exc:
            raise ImagePullError("ErrImagePull", _daemon_message(image, ref, exc)) from exc
        pulled = PulledImage(
            image=image,
            image_id=f"docker-pullable://{ref.registry}/{ref.repository}@{info.digest}",
            build=SimBuild.from_labels(info.labels),
            flow_root=info.labels.get(ROOT_LABEL) or None,
        )
        with self._lock:
            self._present[image] = pulled
        return pulled

    def _source(self, registry: str) -> str | None:
        """Where to pull from: the sandbox registry, or another loopback registry (a front
        to it, as sandbox/registry_front.py injects faults with); None for any other host."""
        port = self.host.rsplit(":", 1)[-1]
        if registry in (self.host, f"localhost:{port}", f"127.0.0.1:{port}"):
            return self.registry_url
        loopback = registry.rsplit(":", 1)[0] in ("127.0.0.1", "localhost")
        return f"http://{registry}" if loopback else None


def _daemon_message(image: str, ref: ImageRef, exc: RegistryError) -> str:
    if isinstance(exc, ImageNotFound):
        return f"{_DAEMON}: manifest for {image} not found: manifest unknown: manifest unknown"
    if isinstance(exc, RegistryAuthError):
        return (
            f"{_DAEMON}: pull access denied for {ref.registry}/{ref.repository}, repository "
            "does not exist or may require 'docker login': denied: requested access to the "
            "resource is denied"
        )
    if isinstance(exc, RegistryUnavailable):
        return f'{_DAEMON}: Get "http://{ref.registry}/v2/": {exc}'
    return f"{_DAEMON}: {exc}"
