"""Does the Prefect API the relay posts to require authentication?

Prefect's server accepts every request unless it was started with
PREFECT_SERVER_API_AUTH_STRING; then anyone who can reach it could post the
`handoff.merge` events that start handoffs. Asked at start: a protected endpoint
without credentials (401 expected), then with the relay's own (PREFECT_API_AUTH_STRING,
or PREFECT_API_KEY for Prefect Cloud).
"""

from __future__ import annotations

from typing import Literal

import httpx

from flows.prefect_access import PROBE, auth_headers, probe


class PrefectAuthProblem(Exception):
    """The Prefect API cannot be used safely, or could not be asked; the message says why."""


class PrefectUnreachable(PrefectAuthProblem):
    """The Prefect API did not answer: whether it requires authentication is unknown."""


def check_prefect_auth(
    api_url: str, *, timeout_s: float = 10.0
) -> Literal["open", "authenticated"]:
    """'open' when the API answers without credentials, 'authenticated' when it refuses
    those and accepts the relay's; PrefectAuthProblem otherwise."""
    try:
        anonymous = probe(api_url, {}, timeout_s=timeout_s)
        if anonymous.status_code < 300:
            return "open"
        if anonymous.status_code != 401:
            raise PrefectAuthProblem(
                f"Prefect API {api_url} answered {anonymous.status_code} to POST {PROBE}; "
                "expected 401 without credentials: is this the API URL (ending in /api)?"
            )
        ours = probe(api_url, auth_headers(), timeout_s=timeout_s)
    except httpx.HTTPError as exc:
        raise PrefectUnreachable(
            f"Prefect API {api_url} unreachable ({exc}): cannot tell whether it requires "
            "authentication; start it first"
        ) from exc
    if ours.status_code == 401:
        raise PrefectAuthProblem(
            f"Prefect API {api_url} requires authentication and refused this relay's "
            "credentials: set PREFECT_API_AUTH_STRING to the server's "
            "PREFECT_SERVER_API_AUTH_STRING (user:password)"
        )
    if ours.status_code >= 300:
        raise PrefectAuthProblem(
            f"Prefect API {api_url} answered {ours.status_code} to POST {PROBE} with this "
            "relay's credentials; expected 200"
        )
    return "authenticated"
