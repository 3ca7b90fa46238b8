"""The registry client resolves tags to the digests the registry stores for OCI and Docker
manifests alike (because it always sends the full Accept list), follows an index to the
linux/amd64 manifest, and maps every upstream failure to one ``ociclient.errors`` class."""

from __future__ import annotations

import httpx
import pytest

from ociclient.client import OCI_MANIFEST, RegistryClient
from ociclient.errors import ImageNotFound, RegistryUnavailable
from ociclient.ref import ImageRef
from sandbox import procs
from sandbox.publisher import publish
from sandbox.registry import Registry
from sandbox.srcrepo import SourceRepo


@pytest.mark.parametrize("media", ["oci", "docker"])
def test_tag_resolves_to_the_pushed_digest(
    registry: Registry, repository: str, source: SourceRepo, media: str
) -> None:
    digest = publish(registry.url, repository, "sm70", git_repo=source.path,
                     commit=source.commits["fix"], media=media)  # type: ignore[arg-type]  # fmt: skip
    with RegistryClient(registry.url) as client:
        assert client.resolve(repository, "sm70") == digest
        image = client.read_image(repository, "sm70")
    assert image.digest == image.manifest_digest == digest


def test_without_accept_the_registry_hides_an_oci_manifest(
    registry: Registry, repository: str, source: SourceRepo
) -> None:
    """Why the client always sends Accept: docker-registry answers 404 otherwise."""
    publish(registry.url, repository, "sm70", git_repo=source.path, commit="main")
    url = f"{registry.url}/v2/{repository}/manifests/sm70"
    assert httpx.get(url, headers={"Accept": ""}).status_code == 404
    assert httpx.get(url, headers={"Accept": OCI_MANIFEST}).status_code == 200


@pytest.mark.parametrize("media", ["oci", "docker"])
def test_index_is_followed_to_linux_amd64(
    registry: Registry, repository: str, source: SourceRepo, media: str
) -> None:
    digest = publish(registry.url, repository, "multi", git_repo=source.path, commit="main",
                     platforms=("linux/arm64", "linux/amd64"), media=media)  # type: ignore[arg-type]  # fmt: skip
    with RegistryClient(registry.url) as client:
        index = client.read_manifest(repository, digest)
        amd64 = [m["digest"] for m in index.body["manifests"]
                 if m["platform"]["architecture"] == "amd64"]  # fmt: skip
        image = client.read_image(repository, "multi")
        assert (image.digest, image.manifest_digest) == (digest, amd64[0])
        with pytest.raises(ImageNotFound, match=r"no linux/s390x manifest.*linux/arm64"):
            client.read_image(repository, "multi", platform="linux/s390x")


def test_missing_tag(registry: Registry, repository: str) -> None:
    with RegistryClient(registry.url) as client:
        assert client.resolve(repository, "nope") is None
        with pytest.raises(ImageNotFound, match=rf"{repository}/manifests/nope.*MANIFEST_UNKNOWN"):
            client.read_image(repository, "nope")


def test_unreachable_registry_is_transient() -> None:
    url = f"http://127.0.0.1:{procs.free_port()}"
    with (
        RegistryClient(url, retry_s=0.5) as client,
        pytest.raises(RegistryUnavailable, match=url) as info,
    ):
        client.resolve("any/repo", "tag")
    assert isinstance(info.value.__cause__, httpx.ConnectError)


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("127.0.0.1:5000/riotpiao-poimen/candle-vllm:sm70",
         "127.0.0.1:5000", "riotpiao-poimen/candle-vllm", "sm70", None),
        ("forgejo.riotpiao.com/riotpiao-poimen/candle-vllm:sm70-gptq-slim",
         "forgejo.riotpiao.com", "riotpiao-poimen/candle-vllm", "sm70-gptq-slim", None),
        ("localhost:5000/app@sha256:abc", "localhost:5000", "app", None, "sha256:abc"),
        ("nginx:1.27", "registry-1.docker.io", "library/nginx", "1.27", None),
        ("team/app:v1", "registry-1.docker.io", "team/app", "v1", None),
    ],
)  # fmt: skip
def test_image_ref_parse(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )
    assert ImageRef.parse(str(ref)) == ref


@pytest.mark.parametrize("text", ["127.0.0.1:5000/app", "", "127.0.0.1:5000/"])
def test_image_ref_needs_a_tag_or_digest(text: str) -> None:
    with pytest.raises(ValueError, match="expected REGISTRY/REPOSITORY:TAG"):
        ImageRef.parse(text)


def test_loopback_registries_are_plain_http() -> None:
    assert ImageRef.parse("127.0.0.1:5000/a:b").base_url == "http://127.0.0.1:5000"
    assert ImageRef.parse("ghcr.io/a/b:c").base_url == "https://ghcr.io"
