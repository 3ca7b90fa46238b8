"""May this process use the Prefect API it is pointed at?

A Prefect server started with PREFECT_SERVER_API_AUTH_STRING answers 401 to every
request without the same `user:password` (its health probe aside); asked once, before a
command does anything, so a missing credential is a clear error rather than a traceback
half-way through.
"""

from __future__ import annotations

import base64

import httpx
from prefect.settings import get_current_settings

PROBE = "/flows/filter"


class PrefectRefused(RuntimeError):
    """The Prefect API refused this process's credentials (401); the message says what to set."""


def auth_headers() -> dict[str, str]:
    """The credentials the local Prefect settings carry (API key or basic auth string)."""
    api = get_current_settings().api
    if api.key:
        return {"Authorization": f"Bearer {api.key.get_secret_value()}"}
    if api.auth_string:
        token = base64.b64encode(api.auth_string.get_secret_value().encode()).decode()
        return {"Authorization": f"Basic {token}"}
    return {}


def probe(api_url: str, headers: dict[str, str], *, timeout_s: float) -> httpx.Response:
    """A cheap read that an authenticated server refuses without credentials."""
    url = f"{api_url.rstrip('/')}{PROBE}"
    return httpx.post(url, json={"limit": 1}, headers=headers, timeout=timeout_s)


def require_access(api_url: str, *, timeout_s: float = 10.0) -> None:
    """PrefectRefused when the API answers 401 with this process's credentials
    (PREFECT_API_AUTH_STRING or PREFECT_API_KEY). An API that does not answer is left to
    the caller, which knows whether Prefect is optional to it."""
    headers = auth_headers()
    try:
        answer = probe(api_url, headers, timeout_s=timeout_s)
    except httpx.HTTPError:
        return
    if answer.status_code != 401:
        return
    given = "refused the credentials given" if headers else "no credentials were given"
    raise PrefectRefused(
        f"Prefect API {api_url} answered 401 Unauthorized to POST {PROBE}: it requires "
        f"authentication and {given}; set PREFECT_API_AUTH_STRING to the server's "
        "PREFECT_SERVER_API_AUTH_STRING (user:password; for the sandbox's Prefect: "
        'eval "$(handoff sandbox env)")'
    )
