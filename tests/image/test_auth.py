"""Registry auth against real docker-registry instances: a Bearer token challenge (the
registry's own ``auth: token``, with a token service made here) and a Basic challenge
(``auth: htpasswd``) are answered with credentials from the environment; refusals map to
``RegistryAuthError`` and no message or repr ever contains a secret."""

from __future__ import annotations

import json
import socket
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.image import check_image
from ociclient.auth import (
    RegistryAuth,
    RegistryCredentials,
    credentials_from_env,
    load_credentials,
)
from ociclient.client import LABEL_REVISION, RegistryClient
from ociclient.errors import RegistryAuthError, RegistryUnavailable
from sandbox.publisher import publish
from sandbox.registry import Registry
from sandbox.srcrepo import SourceRepo
from tests.image.conftest import MakeRequirement
from tests.image.token_service import SERVICE, TokenService

USER, PASSWORD = "ci", "s3cret-Pa55"
ENV = {"HANDOFF_REGISTRY_USERNAME": USER, "HANDOFF_REGISTRY_PASSWORD": PASSWORD}


@pytest.fixture(scope="module")
def token_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenService]:
    service = TokenService(tmp_path_factory.mktemp("token"), username=USER, password=PASSWORD)
    yield service
    service.close()


@pytest.fixture(scope="module")
def bearer_registry(
    tmp_path_factory: pytest.TempPathFactory, token_service: TokenService
) -> Iterator[Registry]:
    started = Registry.start(tmp_path_factory.mktemp("bearer"), auth=token_service.registry_auth())
    yield started
    started.stop()


@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # glibc's crypt makes the bcrypt hash docker-registry's htpasswd needs

    directory = tmp_path_factory.mktemp("basic")
    hashed = crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
    (directory / "htpasswd").write_text(f"{USER}:{hashed}\n")
    auth = {"htpasswd": {"realm": "handoff-test", "path": str(directory / "htpasswd")}}
    started = Registry.start(directory, auth=auth)
    yield started
    started.stop()


def _auth(env: dict[str, str]) -> RegistryAuth:
    return RegistryAuth(credentials_from_env(env))


@pytest.mark.parametrize("kind", ["bearer", "basic"])
def test_push_and_read_with_credentials_from_env(
    kind: str, request: pytest.FixtureRequest, repository: str, source: SourceRepo
) -> None:
    registry: Registry = request.getfixturevalue(f"{kind}_registry")
    auth = _auth(ENV)
    digest = publish(registry.url, repository, "sm70", git_repo=source.path,
                     commit=source.commits["fix"], auth=auth)  # fmt: skip
    with RegistryClient(registry.url, auth=auth) as client:
        assert client.resolve(repository, "sm70") == digest
        assert client.read_image(repository, "sm70").labels[LABEL_REVISION] == source.commits["fix"]


def test_bearer_challenge_scope_reaches_the_token_service(
    bearer_registry: Registry, token_service: TokenService, repository: str, source: SourceRepo
) -> None:
    publish(bearer_registry.url, repository, "sm70", git_repo=source.path, commit="main",
            auth=_auth(ENV))  # fmt: skip
    asked = set()
    for query in token_service.requests:
        kind, name, actions = query.get("scope", "::").split(":")
        asked.add((query.get("service"), kind, name, frozenset(actions.split(","))))
    # The registry lists the actions in no fixed order ("pull,push" or "push,pull").
    assert (SERVICE, "repository", repository, frozenset({"pull", "push"})) in asked


@pytest.mark.parametrize("kind", ["bearer", "basic"])
@pytest.mark.parametrize("env", [{}, {**ENV, "HANDOFF_REGISTRY_PASSWORD": "wrong-pass"}])
def test_refused_credentials_raise_without_leaking(
    kind: str, env: dict[str, str], request: pytest.FixtureRequest, repository: str
) -> None:
    registry: Registry = request.getfixturevalue(f"{kind}_registry")
    client = RegistryClient(registry.url, auth=_auth(env))
    with client, pytest.raises(RegistryAuthError, match=r"401") as info:
        client.resolve(repository, "sm70")
    for secret in (PASSWORD, "wrong-pass"):
        assert secret not in str(info.value)


def test_a_token_service_that_never_answers_is_a_timeout_not_a_hang(
    tmp_path: Path, token_service: TokenService, repository: str
) -> None:
    """The token fetch inside the auth flow keeps the client's own timeout: a token service
    that accepts connections and never answers makes the registry unavailable, in bounded
    time, instead of holding the image wait (or a pull) forever."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes connections; nobody reads or answers
        auth = token_service.registry_auth()
        auth["token"]["realm"] = f"http://127.0.0.1:{silent.getsockname()[1]}/token"  # type: ignore[index]
        registry = Registry.start(tmp_path / "registry", auth=auth)
        try:
            started = time.monotonic()
            client = RegistryClient(registry.url, auth=_auth(ENV), timeout_s=1.0, retry_s=1.0)
            with client, pytest.raises(RegistryUnavailable, match="did not answer"):
                client.resolve(repository, "sm70")
            assert time.monotonic() - started < 10
        finally:
            registry.stop()


def test_check_image_uses_env_credentials(
    bearer_registry: Registry, repository: str, source: SourceRepo,
    make_requirement: MakeRequirement, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    publish(bearer_registry.url, repository, "sm70", git_repo=source.path,
            commit=source.commits["fix"], auth=_auth(ENV))  # fmt: skip
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)  # the process environment, as in production
    pinned = check_image(make_requirement(repo=f"{bearer_registry.host}/{repository}"))
    assert pinned.revision == source.commits["fix"]


def test_secrets_stay_out_of_reprs(tmp_path: Path) -> None:
    credentials = RegistryCredentials(username=USER, password=PASSWORD, token="tok-123")  # type: ignore[arg-type]
    for text in (repr(credentials), str(credentials), repr(RegistryAuth(credentials))):
        assert PASSWORD not in text and "tok-123" not in text


@pytest.mark.slow
def test_credentials_from_a_prefect_secret_block(
    basic_registry: Registry, repository: str, source: SourceRepo
) -> None:
    """A block holding a dict, or the same as a JSON string, yields working credentials."""
    from prefect.blocks.system import Secret
    from prefect.testing.utilities import prefect_test_harness

    pair = {"username": USER, "password": PASSWORD}
    with prefect_test_harness():
        Secret(value=pair).save("registry-dict")
        Secret(value=json.dumps(pair)).save("registry-json")
        loaded = [load_credentials(name) for name in ("registry-dict", "registry-json")]
    for credentials in loaded:
        assert credentials is not None and credentials.username == USER
        publish(basic_registry.url, repository, "sm70", git_repo=source.path, commit="main",
                auth=RegistryAuth(credentials))  # fmt: skip
