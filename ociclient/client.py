"""A small read-only client for the OCI distribution API (registry v2) on httpx.

Resolves a tag to its digest, follows an image index (or Docker manifest list) to one
platform's manifest and reads the labels of that manifest's config blob. Every manifest
request carries the full Accept list: without it Docker's registry answers an OCI manifest
with 404 and rewrites a schema2 manifest to schema1 (a different digest). Bodies fetched by
digest are verified against it. httpx errors and HTTP statuses are mapped to
``ociclient.errors`` here, once.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from ociclient.errors import (
    ImageNotFound,
    RegistryAuthError,
    RegistryRefused,
    RegistryUnavailable,
)
from retrypolicy.retry import Retry, policy, retry_after, with_retries

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_ACCEPT = ", ".join((OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST))
LABEL_REVISION = "org.opencontainers.image.revision"
LABEL_SOURCE = "org.opencontainers.image.source"
# How long a request made at or near its deadline may still take: long enough for any
# registry that is answering, so the wait's last look judges the image, not the clock.
_LAST_TRY_S = 2.0


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def registry_base_url(host: str) -> str:
    """Plain HTTP for loopback registries (the sandbox), HTTPS for every other host."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    scheme = "http" if name in ("127.0.0.1", "localhost", "[::1]") else "https"
    return f"{scheme}://{host}"


class Manifest(BaseModel):
    """A manifest or index as served, with the digest it was verified against."""

    model_config = ConfigDict(frozen=True)

    digest: str
    media_type: str
    body: dict[str, Any]


class ImageInfo(BaseModel):
    """What a reference resolves to, down to the platform's config labels."""

    model_config = ConfigDict(frozen=True)

    repository: str
    digest: str  # what the reference points at: an index or a manifest
    manifest_digest: str  # the platform manifest a node would run
    platform: str
    labels: dict[str, str]


class RegistryClient:
    """Reads manifests and config blobs from one registry."""

    def __init__(
        self,
        base_url: str,
        *,
        auth: httpx.Auth | None = None,
        timeout_s: float = 10.0,
        retry_s: float | None = None,
        deadline: float | None = None,
    ) -> None:
        """retry_s: how long a request is retried (429, 5xx, no answer) by the one retry
        policy (retrypolicy/retry.py); None: the policy's own bound. deadline: a
        time.monotonic() past which no request is retried (a caller's own timeout);
        a request made within 2 s of it, or after it, may take those 2 s."""
        self.base_url = base_url.rstrip("/")
        self._retry = policy(retry_s)
        self._timeout_s, self._deadline = timeout_s, deadline
        self._http = httpx.Client(
            base_url=self.base_url, auth=auth, timeout=timeout_s, follow_redirects=True
        )

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def resolve(self, repository: str, reference: str) -> str | None:
        """The digest a tag (or digest) points at now, or None if the registry has none."""
        try:
            response = self._request("HEAD", f"/v2/{repository}/manifests/{reference}")
        except ImageNotFound:
            return None
        digest = response.headers.get("Docker-Content-Digest")
        return digest or self.read_manifest(repository, reference).digest

    def read_manifest(self, repository: str, reference: str) -> Manifest:
        response = self._request("GET", f"/v2/{repository}/manifests/{reference}")
        expected = reference if reference.startswith("sha256:") else None
        digest = self._verified(response, expected, what=f"manifest {repository}:{reference}")
        media_type = response.headers.get("Content-Type", "").split(";")[0]
        body = json.loads(response.content)
        return Manifest(digest=digest, media_type=body.get("mediaType", media_type), body=body)

    def read_config(self, repository: str, digest: str) -> dict[str, Any]:
        response = self._request("GET", f"/v2/{repository}/blobs/{digest}", accept="*/*")
        self._verified(response, digest, what=f"config blob {repository}@{digest}")
        config: dict[str, Any] = json.loads(response.content)
        return config

    def read_image(
        self, repository: str, reference: str, *, platform: str = "linux/amd64"
    ) -> ImageInfo:
        """Resolve ``reference``, follow an index to ``platform`` and read the config labels."""
        top = self.read_manifest(repository, reference)
        manifest = top
        if top.media_type in INDEX_TYPES:
            manifest = self.read_manifest(repository, pick_platform(top, platform, repository))
        config = self.read_config(repository, manifest.body["config"]["digest"])
        labels = (config.get("config") or {}).get("Labels") or {}
        return ImageInfo(
            repository=repository,
            digest=top.digest,
            manifest_digest=manifest.digest,
            platform=platform,
            labels={str(k): str(v) for k, v in labels.items()},
        )

    def _request(self, method: str, path: str, *, accept: str = MANIFEST_ACCEPT) -> httpx.Response:
        url = f"{self.base_url}{path}"

        def attempt() -> httpx.Response:
            try:
                response = self._http.request(
                    method, path, headers={"Accept": accept}, timeout=self._left(self._timeout_s)
                )
            except RegistryUnavailable as exc:  # the token service's 429 or 5xx
                raise Retry(exc) from exc
            except httpx.TransportError as exc:
                unavailable = RegistryUnavailable(
                    f"registry {self.base_url} did not answer {method} {path} ({exc!r}); "
                    "check that it is running and reachable, then retry."
                )
                unavailable.__cause__ = exc
                raise Retry(unavailable) from exc
            try:
                raise_for_registry_status(response, f"{method} {url}")
            except RegistryUnavailable as exc:
                after = retry_after(response.headers.get("Retry-After"))
                raise Retry(exc, after_s=after) from exc
            return response

        rules = policy(self._left(self._retry.budget_s))  # as the apiserver client bounds it
        return with_retries(attempt, what=f"registry {method} {url}", rules=rules)

    def _left(self, bound_s: float) -> float:
        """bound_s, cut to the time left before the deadline, but never under _LAST_TRY_S."""
        if self._deadline is None:
            return bound_s
        return min(bound_s, max(self._deadline - time.monotonic(), _LAST_TRY_S))

    def _verified(self, response: httpx.Response, expected: str | None, *, what: str) -> str:
        actual = sha256_digest(response.content)
        claimed = expected or response.headers.get("Docker-Content-Digest") or actual
        if actual != claimed:
            raise RegistryRefused(
                f"{what} from {self.base_url}: content hashes to {actual}, expected {claimed}. "
                "The registry or a proxy altered it; do not use this image."
            )
        return actual


def pick_platform(index: Manifest, platform: str, repository: str) -> str:
    """The digest of ``platform``'s manifest in an index (``os/arch`` or ``os/arch/variant``)."""
    wanted = platform.split("/")
    offered = []
    for entry in index.body.get("manifests", []):
        p = entry.get("platform") or {}
        have = [p.get("os", ""), p.get("architecture", ""), p.get("variant", "")]
        have = [part for part in have if part]
        offered.append("/".join(have))
        if have[: len(wanted)] == wanted:
            return str(entry["digest"])
    raise ImageNotFound(
        f"index {repository}@{index.digest} has no {platform} manifest (offers: "
        f"{', '.join(offered) or 'none'}); publish a {platform} build or choose another platform."
    )


def raise_for_registry_status(response: httpx.Response, what: str) -> None:
    """Map a registry error status to ``ociclient.errors``, quoting the registry's error codes."""
    status = response.status_code
    if status < 400:
        return
    detail = _error_codes(response)
    if status >= 500 or status == 429:  # 429: rate limited (Docker Hub's pull limit)
        raise RegistryUnavailable(f"{what}: registry error {status} {detail}; retry later.")
    if status in (401, 403):
        raise RegistryAuthError(
            f"{what}: HTTP {status} {detail}; expected access. Set HANDOFF_REGISTRY_USERNAME/"
            "HANDOFF_REGISTRY_PASSWORD (or a token / Secret block) with pull rights."
        )
    if status == 404:
        raise ImageNotFound(f"{what}: not found {detail}; check the repository and tag.")
    raise RegistryRefused(f"{what}: HTTP {status} {detail}.")


def _error_codes(response: httpx.Response) -> str:
    if response.request.method == "HEAD":
        return ""
    try:
        errors = response.json().get("errors") or []
    except ValueError:
        return ""
    return "(" + "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors) + ")"
