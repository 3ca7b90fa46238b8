"""Registry credentials and the httpx auth flow for the OCI distribution API.

Anonymous, Basic and the Bearer token challenge (``WWW-Authenticate: Bearer realm=…,
service=…,scope=…`` as Docker Hub, GHCR and Forgejo/Gitea answer) are handled by one
``httpx.Auth``: it sends the request, and on a 401 answers the challenge and retries once.
Credentials come from the environment or a Prefect Secret block and are never logged: they
live in ``SecretStr`` fields and no message built here contains them.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Generator, Mapping
from typing import Any, cast

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr

from ociclient.errors import RegistryAuthError, RegistryUnavailable

ENV_USERNAME = "HANDOFF_REGISTRY_USERNAME"
ENV_PASSWORD = "HANDOFF_REGISTRY_PASSWORD"
ENV_TOKEN = "HANDOFF_REGISTRY_TOKEN"
ENV_SECRET_BLOCK = "HANDOFF_REGISTRY_SECRET_BLOCK"

_PARAM = re.compile(r'(\w+)="([^"]*)"')


class RegistryCredentials(BaseModel):
    """A username/password pair, or a bearer token used as it is."""

    model_config = ConfigDict(frozen=True)

    username: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None


class Challenge(BaseModel):
    """One parsed ``WWW-Authenticate`` header."""

    scheme: str
    params: dict[str, str]


def credentials_from_env(env: Mapping[str, str] = os.environ) -> RegistryCredentials | None:
    """Credentials from ``HANDOFF_REGISTRY_USERNAME``/``_PASSWORD`` or ``_TOKEN``, if set."""
    username, password, token = env.get(ENV_USERNAME), env.get(ENV_PASSWORD), env.get(ENV_TOKEN)
    if not (username or token):
        return None
    return RegistryCredentials(
        username=username,
        password=SecretStr(password) if password else None,
        token=SecretStr(token) if token else None,
    )


def credentials_from_secret_block(name: str) -> RegistryCredentials:
    """Credentials from a Prefect Secret block holding ``{"username","password"}`` or a token."""
    from prefect.blocks.system import Secret  # Prefect only on this path: it is slow to import

    # Outside an event loop, as here, Prefect's load returns the block, not a coroutine
    value = cast("Secret[Any]", Secret.load(name)).get()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return RegistryCredentials(token=SecretStr(value))
    if not isinstance(value, dict):
        raise RegistryAuthError(
            f"Prefect Secret block {name!r} holds a {type(value).__name__}; expected a token "
            'string or {"username": ..., "password": ...}. Re-create the block in that form.'
        )
    return RegistryCredentials.model_validate(value)


def load_credentials(secret_block: str | None = None) -> RegistryCredentials | None:
    """The block named here (or in ``HANDOFF_REGISTRY_SECRET_BLOCK``), else the environment."""
    block = secret_block or os.environ.get(ENV_SECRET_BLOCK)
    return credentials_from_secret_block(block) if block else credentials_from_env()


def parse_challenge(header: str) -> Challenge:
    """Split ``Bearer realm="…",service="…"`` into a scheme and its parameters."""
    scheme, _, rest = header.strip().partition(" ")
    return Challenge(scheme=scheme.lower(), params=dict(_PARAM.findall(rest)))


class RegistryAuth(httpx.Auth):
    """Answers Basic and Bearer challenges, reusing the last accepted header."""

    requires_response_body = True

    def __init__(self, credentials: RegistryCredentials | None = None) -> None:
        self._credentials = credentials or RegistryCredentials()
        token = self._credentials.token
        self._header = f"Bearer {token.get_secret_value()}" if token else None

    def __repr__(self) -> str:  # the header holds a secret
        return f"RegistryAuth(username={self._credentials.username!r})"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self._header:
            request.headers["Authorization"] = self._header
        response = yield request
        if response.status_code != 401:
            return
        challenge = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if challenge.scheme == "basic":
            header = self._basic_header()
        elif challenge.scheme == "bearer":
            token_response = yield self._token_request(challenge, request)
            header = f"Bearer {self._read_token(challenge, token_response)}"
        else:
            return
        if header is None or header == request.headers.get("Authorization"):
            return  # the same answer would be refused again: let the caller see the 401
        self._header = header
        request.headers["Authorization"] = header
        yield request

    def _basic_header(self) -> str | None:
        creds = self._credentials
        if not (creds.username and creds.password):
            return None
        pair = f"{creds.username}:{creds.password.get_secret_value()}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    def _token_request(self, challenge: Challenge, original: httpx.Request) -> httpx.Request:
        realm = challenge.params.get("realm")
        if not realm:
            raise RegistryAuthError(
                "registry sent a Bearer challenge without a realm; expected realm=<token URL>. "
                "The registry's auth configuration is broken: report it to its operator."
            )
        params = {k: v for k, v in challenge.params.items() if k in ("service", "scope")}
        # httpx sets timeouts only on the request it was asked to send: without the
        # original's, a token service that never answers would hold the caller forever.
        timeout = original.extensions.get("timeout")
        extensions = {"timeout": timeout} if timeout is not None else None
        request = httpx.Request("GET", realm, params=params, extensions=extensions)
        basic = self._basic_header()
        if basic:
            request.headers["Authorization"] = basic
        return request

    def _read_token(self, challenge: Challenge, response: httpx.Response) -> str:
        who = self._credentials.username or "anonymous"
        scope = challenge.params.get("scope", "(none)")
        if response.status_code == 429 or response.status_code >= 500:
            raise RegistryUnavailable(
                f"token service {challenge.params['realm']} answered HTTP "
                f"{response.status_code} for scope {scope}; retry later."
            )
        if response.status_code != 200:
            raise RegistryAuthError(
                f"token service {challenge.params['realm']} refused {who} for scope {scope} "
                f"(HTTP {response.status_code}); expected a token. Check the registry "
                f"credentials ({ENV_USERNAME}/{ENV_PASSWORD} or the Secret block)."
            )
        body = response.json()
        token = body.get("token") or body.get("access_token")
        if not token:
            raise RegistryAuthError(
                f"token service {challenge.params['realm']} answered without a token "
                f"(keys: {sorted(body)}); expected 'token' or 'access_token'."
            )
        return str(token)
