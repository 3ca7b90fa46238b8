"""SIGTERM drains like a well-behaved server: requests already streaming run to their last
token and [DONE], new requests (and /health) get 503 meanwhile, and the process exits 0.
With vLLM's `--shutdown-timeout` (`shutdown_timeout_s`; 0 is vLLM's default) streams still
running that long after the signal are cut, as vLLM aborts them."""

from __future__ import annotations

import asyncio
import io
import json
import socket
from pathlib import Path

import httpx

from sandbox.modelserver import ServerConfig
from sandbox.modelserver.api.groundtruth import read_ground_truth
from sandbox.modelserver.drive import StreamResult, load_body, run_streams
from sandbox.modelserver.launch import ServerProcess, start

STREAMS = 16
TOKENS = 60
# 60 tokens at 50 ms keep the streams open 3 s after the signal: time for a client on a
# loaded machine to ask while the server drains (it exits as soon as the last one ends).
CADENCE_MS = 50.0


def open_streams(server: ServerProcess) -> tuple[asyncio.Task[list[StreamResult]], asyncio.Event]:
    """The streams, and an event set once every one has a token."""
    streaming: set[int] = set()
    all_streaming = asyncio.Event()

    def on_event(result: StreamResult) -> None:
        if result.token_events:
            streaming.add(id(result))
        if len(streaming) == STREAMS:
            all_streaming.set()

    bodies = [load_body(max_tokens=TOKENS)] * STREAMS
    streams = asyncio.create_task(run_streams(server.base_url, bodies, on_event=on_event))
    return streams, all_streaming


async def streams_with_sigterm(server: ServerProcess) -> tuple[list[StreamResult], list[int]]:
    """Open the streams, send SIGTERM once every stream has a token, then ask for more."""
    streams, all_streaming = open_streams(server)
    # The client exists before the signal: building one loads the CA bundle, which took
    # 0.5-2 s on a loaded machine, longer than a short drain lasts. A new connection for
    # each request: the drain closes idle kept-alive ones, racing a reuse.
    fresh = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10, limits=fresh) as client:
        await asyncio.wait_for(all_streaming.wait(), 30)
        server.proc.terminate()
        refused = await statuses_while_draining(client)
    return await streams, refused


async def statuses_while_draining(client: httpx.AsyncClient) -> list[int]:
    """/health once the signal is handled, then a new completion request."""
    for _ in range(100):
        health = await client.get("/health")
        if health.status_code == 503:
            break
        await asyncio.sleep(0.01)
    late = await client.post("/v1/completions", json=load_body(max_tokens=1))
    return [health.status_code, late.status_code]


def test_sigterm_lets_sixteen_open_streams_finish(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    config = ServerConfig(profile="cadence", port=0, cadence_ms=CADENCE_MS, ground_truth=truth)
    server = start(config)
    results, refused = asyncio.run(streams_with_sigterm(server))
    assert server.proc.wait(30) == 0
    assert refused == [503, 503]
    assert all(r.done and r.token_events == TOKENS and r.finish_reason == "length" for r in results)
    assert sorted(r.n_out for r in read_ground_truth(truth) if r.stream) == [TOKENS] * STREAMS


def _post(sock: socket.socket, port: int, body: bytes) -> None:
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (port, len(body), body)
    )


def _response(reader: io.BufferedReader) -> tuple[int, dict[str, str], bytes]:
    """One chunked or sized response off a kept-alive connection."""
    status = int(reader.readline().split()[1])
    headers: dict[str, str] = {}
    while (line := reader.readline().strip()) != b"":
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, reader.read(int(headers["content-length"]))
    body = b""
    while (size := int(reader.readline().strip(), 16)) != 0:
        body += reader.read(size)
        reader.readline()
    reader.readline()
    return status, headers, body


def test_a_kept_alive_connection_open_at_sigterm_gets_its_next_answer_then_a_close(
    tmp_path: Path,
) -> None:
    """A client that sends its next request on a connection the moment a response ends
    (as closed-loop clients do) must never race the drain into a reset: that request is
    answered as usual with `connection: close`, and only then does the connection end."""
    config = ServerConfig(profile="cadence", port=0, cadence_ms=CADENCE_MS)
    server = start(config)
    port = int(server.base_url.rsplit(":", 1)[1])
    body = json.dumps({**load_body(max_tokens=20), "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        reader = sock.makefile("rb")
        _post(sock, port, body)
        assert reader.readline().startswith(b"HTTP/1.1 200")  # streaming when the signal comes
        server.proc.terminate()
        while reader.readline().strip() != b"0":  # the stream runs to its end
            pass
        reader.readline()
        _post(sock, port, body)  # at once, on the same connection
        status, headers, answer = _response(reader)
        assert status == 200 and b"data: [DONE]" in answer, (status, answer[-200:])
        assert headers.get("connection") == "close", headers
        assert sock.recv(1) == b"", "the connection stayed open after its last answer"
    assert server.proc.wait(30) == 0


def test_a_shutdown_timeout_cuts_the_streams_still_running() -> None:
    """vLLM's default, `--shutdown-timeout 0`: SIGTERM aborts what runs; the clients see
    broken streams, never [DONE]."""
    config = ServerConfig(profile="cadence", port=0, cadence_ms=CADENCE_MS, shutdown_timeout_s=0)
    server = start(config)

    async def cut() -> list[StreamResult]:
        streams, all_streaming = open_streams(server)
        await asyncio.wait_for(all_streaming.wait(), 30)
        server.proc.terminate()
        return await streams

    results = asyncio.run(cut())
    assert server.proc.wait(30) == 0
    assert results and not any(r.done for r in results), results[:2]
    assert all(r.token_events < TOKENS for r in results)
