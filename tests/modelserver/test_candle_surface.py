"""The candle-vllm surface: a real server process that routes only /v1/models and
/v1/chat/completions (empty 404 elsewhere, as candle-vllm's axum router answers), and whose
port stays closed while it loads the model."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from sandbox.modelserver import ServerConfig
from sandbox.modelserver.launch import ServerProcess, start
from sandbox.traffic import ClientLoad

LOAD_S = 2.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def loading() -> Iterator[tuple[ServerProcess, list[bool]]]:
    """The server, and what connecting to its port found while it was loading."""
    port = _free_port()
    config = ServerConfig(
        profile="clef-flash-candle", port=port, surface="candle-vllm", load_s=LOAD_S
    )
    seen: list[bool] = []
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(start, config)
        begun = time.monotonic()
        while not future.done() and time.monotonic() - begun < LOAD_S - 0.5:
            seen.append(_port_open(port))
            time.sleep(0.1)
        server = future.result()
    try:
        yield server, seen
    finally:
        server.terminate()


@pytest.fixture(scope="module")
def client(loading: tuple[ServerProcess, list[bool]]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=loading[0].base_url, timeout=30) as c:
        yield c


def test_port_is_closed_while_the_model_loads(loading: tuple[ServerProcess, list[bool]]) -> None:
    server, seen = loading
    assert seen and not any(seen), seen
    assert "loading the model" in server.stderr


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/completions"),
        ("GET", "/health"),
        ("POST", "/debug/probes"),
        ("POST", "/v1/heads"),
    ],
)
def test_routes_outside_candle_vllm_are_an_empty_404(
    client: httpx.Client, method: str, path: str
) -> None:
    response = client.request(method, path, json={"model": "clef-flash", "prompt": "Hello"})
    assert response.status_code == 404 and response.content == b"", response.text


def test_models_lists_the_model_as_candle_vllm_does(client: httpx.Client) -> None:
    [card] = client.get("/v1/models").json()["data"]
    assert card["id"] == "clef-flash" and card["owned_by"] == "candle-vllm"


def test_chat_answers_plain_and_streamed(client: httpx.Client) -> None:
    body = {
        "model": "clef-flash",
        "messages": [{"role": "user", "content": "Name a prime number."}],
        "max_tokens": 6,
        "temperature": 0,
    }
    plain = client.post("/v1/chat/completions", json=body)
    assert plain.status_code == 200, plain.text
    text = plain.json()["choices"][0]["message"]["content"]
    assert text
    with client.stream("POST", "/v1/chat/completions", json=body | {"stream": True}) as response:
        assert response.status_code == 200
        raw = response.read().decode()
    events = [e.removeprefix("data: ") for e in raw.strip().split("\n\n") if e.startswith("data")]
    assert events[-1] == "[DONE]"
    deltas = [json.loads(e)["choices"] for e in events[:-1]]
    streamed = "".join(c[0]["delta"].get("content") or "" for c in deltas if c)
    assert streamed == text


def test_client_traffic_speaks_chat_to_it(client: httpx.Client) -> None:
    url = str(client.base_url).rstrip("/")
    with ClientLoad(url, api="chat", streams=2, max_requests=6) as load:
        while len(load.outcomes) < 6:
            time.sleep(0.05)
    assert load.succeeded >= 6 and not load.failed
    with ClientLoad(url, streams=1, max_requests=1) as load:  # raw completions: 404
        while not load.outcomes:
            time.sleep(0.05)
    assert [o.detail[:8] for o in load.failed] == ["HTTP 404"]
