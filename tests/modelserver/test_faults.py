"""The seeds' faults, each chosen by a flag: a panic at start with the cudarc message, a
cold start during which /health (and every request) answers 503, and streams that stop
mid-response and never finish while the server otherwise stays up. A server whose compute
process dies exits rather than hanging."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from sandbox.modelserver import ServerConfig
from sandbox.modelserver.drive import StreamResult, load_body, stream
from sandbox.modelserver.engine.link import ENGINE_DEAD_EXIT_CODE
from sandbox.modelserver.faults import CUDARC_EXIT_CODE
from sandbox.modelserver.launch import ServerStartError, launched, start
from tests.modelserver.conftest import StartServers

# The cold start counts from the banner, and both first requests must land inside it: long
# enough that a stalled test process on a loaded machine still sees it.
SLOW_START_S = 6.0
STALL_AFTER = 3


def test_crash_on_start_panics_like_cudarc_without_libcuda() -> None:
    with pytest.raises(ServerStartError) as caught:
        start(ServerConfig(profile="fp16-14b-tp2", port=0, faults=["crash_on_start"]))
    assert caught.value.exit_code == CUDARC_EXIT_CODE
    assert "Unable to dynamically load the cuda shared library" in caught.value.stderr


@pytest.fixture(scope="module")
def stalling(start_servers: StartServers) -> str:
    (server,) = start_servers(
        {"profile": "cadence", "cadence_ms": 10.0, "faults": ["stall"]}
        | {"stall_after_tokens": STALL_AFTER},
    )
    return server.base_url


def test_slow_start_answers_503_until_the_model_is_loaded() -> None:
    # The client exists before the server does: building one (its CA bundle) can take
    # seconds on a loaded machine, and the cold start is already running at the banner.
    config = ServerConfig(
        profile="cadence", port=0, faults=["slow_start"], slow_start_s=SLOW_START_S
    )
    with httpx.Client(timeout=10) as client, launched(config) as server:
        first = client.get(server.base_url + "/health")
        body = {"prompt": "x", "max_tokens": 1}
        refused = client.post(server.base_url + "/v1/completions", json=body)
        deadline = time.monotonic() + 10 * SLOW_START_S
        while client.get(server.base_url + "/health").status_code != 200:
            assert time.monotonic() < deadline, "the server never became ready"
            time.sleep(0.05)
        served = client.post(server.base_url + "/v1/completions", json=body)
    assert first.status_code == 503 and first.json()["status"] == "starting"
    assert refused.status_code == 503 and "loading" in refused.json()["error"]["message"]
    assert served.status_code == 200


def test_stall_stops_every_stream_mid_response(stalling: str) -> None:
    partial = StreamResult()

    def keep(result: StreamResult) -> None:
        nonlocal partial
        partial = result

    async def read_for(seconds: float) -> None:
        task = asyncio.create_task(
            stream(stalling, "/v1/completions", load_body(max_tokens=20), on_event=keep)
        )
        done, _ = await asyncio.wait([task], timeout=seconds)
        task.cancel()
        assert not done, "a stalled stream finished"

    asyncio.run(read_for(1.0))  # 100 cadence intervals: ample time for all 20 tokens
    assert partial.token_events == STALL_AFTER and not partial.done
    assert httpx.get(stalling + "/health", timeout=10).status_code == 200


def test_a_dead_compute_process_stops_the_server_instead_of_hanging() -> None:
    server = start(ServerConfig(profile="cadence", port=0))
    try:
        compute = [pid for pid in _children(server.proc.pid) if "pipe_handle" in _cmdline(pid)]
        assert len(compute) == 1, "expected one compute process"
        os.kill(compute[0], signal.SIGKILL)
        assert server.proc.wait(30) == ENGINE_DEAD_EXIT_CODE
        assert "compute process exited unexpectedly" in server.stderr
    finally:
        server.terminate()


def _children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    return [int(c) for t in tasks.iterdir() for c in (t / "children").read_text().split()]


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
