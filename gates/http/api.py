"""Plain (non-streaming) calls to an OpenAI-compatible server, errors mapped once here.

httpx exceptions and non-2xx answers become `ServerError` naming the URL, what was expected
and what came back; the original exception is chained.
"""

from __future__ import annotations

from typing import Any

import httpx

from gates.errors import ServerError


def make_client(base_url: str, *, timeout_s: float) -> httpx.AsyncClient:
    """A plain client for loopback servers; ignores proxy environment variables."""
    return httpx.AsyncClient(base_url=base_url, timeout=timeout_s, trust_env=False)


async def get_json(client: httpx.AsyncClient, path: str) -> dict[str, Any]:
    return await _call(client, "GET", path, None)


async def post_json(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return await _call(client, "POST", path, body)


async def post_json_if_present(
    client: httpx.AsyncClient, path: str, body: dict[str, Any]
) -> dict[str, Any] | None:
    """Like `post_json`, but None when the server has no such endpoint (HTTP 404)."""
    response = await _send(client, "POST", path, body)
    if response.status_code == 404:
        return None
    return _payload(response, "POST", client.base_url.join(path))


async def _send(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None
) -> httpx.Response:
    """One call; an unreachable server becomes a ServerError that names the address."""
    try:
        return await client.request(method, path, json=body)
    except httpx.HTTPError as exc:
        raise ServerError(
            f"{method} {client.base_url.join(path)} failed ({type(exc).__name__}: {exc}); "
            "check that the server is running and listening on that address"
        ) from exc


async def probe(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any] | None, httpx.Headers]:
    """Status, JSON object (None if the body is not one) and headers of one call; raises only
    when the server cannot be reached. For discovering what a server offers."""
    response = await _send(client, method, path, body)
    try:
        payload = response.json()
    except ValueError:
        payload = None
    return response.status_code, payload if isinstance(payload, dict) else None, response.headers


async def _call(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None
) -> dict[str, Any]:
    return _payload(await _send(client, method, path, body), method, client.base_url.join(path))


def _payload(response: httpx.Response, method: str, url: httpx.URL) -> dict[str, Any]:
    """The JSON object of a 200 answer; anything else is a ServerError naming the call."""
    if response.status_code != 200:
        raise ServerError(
            f"{method} {url} answered HTTP {response.status_code}, expected 200: "
            f"{response.text[:300]}"
        )
    try:
        payload = response.json()
    except ValueError as exc:
        raise ServerError(f"{method} {url} answered non-JSON: {response.text[:200]!r}") from exc
    if not isinstance(payload, dict):
        raise ServerError(f"{method} {url} answered {type(payload).__name__}, expected an object")
    return payload


def first_choice(payload: dict[str, Any], answer: str) -> dict[str, Any]:
    """The first choice of a completion answer; ServerError naming `answer` when it has none."""
    choices = payload.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise ServerError(f"{answer} has no choices: {str(payload)[:200]}")
    return dict(choices[0])


async def list_model_ids(client: httpx.AsyncClient) -> list[str]:
    """Model ids from `/v1/models`, in the server's order."""
    payload = await get_json(client, "/v1/models")
    return [str(entry.get("id")) for entry in payload.get("data") or []]


async def resolve_model_id(client: httpx.AsyncClient, model_id: str | None) -> str:
    """`model_id` if given, else the server's first listed model."""
    if model_id is not None:
        return model_id
    ids = await list_model_ids(client)
    if not ids:
        url = client.base_url.join("/v1/models")
        raise ServerError(f"{url} lists no model; pass the model id")
    return ids[0]
