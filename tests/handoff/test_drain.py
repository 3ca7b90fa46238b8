"""The drain before a workload stops (flows/drain.py), on the seeds' world: a long
generation (minutes of simulated time, seconds here) through the Service finishes before
its pods are told to stop, whether the server says what it runs (clef-serve's vLLM
metrics) or not (candle-vllm: its client connections, read in the pod). The drain
inside a handoff: tests/handoff/test_drain_handoff.py."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from flows.drain import CONNECTIONS, drain
from flows.kube.client import Kube
from sandbox.modelserver.drive import StreamResult, stream
from sandbox.proxy import address_of
from sandbox.state import SandboxState

SCALE = 0.05  # manifests/sandbox/cluster.yaml's time_scale


def _long_chat(url: str, seconds: float) -> tuple[StreamResult, float]:
    """A chat generation lasting `seconds` (real), streamed; its result and end time."""
    body = {
        "messages": [{"role": "user", "content": "Write the whole story."}],
        "max_tokens": 64,
        "temperature": 0,
        "ignore_eos": True,
        "sandbox_duration_s": seconds / SCALE,
    }
    result = asyncio.run(stream(url, "/v1/chat/completions", body))
    return result, time.monotonic()


def _start_long_chat(
    pool: ThreadPoolExecutor, url: str, seconds: float
) -> Future[tuple[StreamResult, float]]:
    future = pool.submit(_long_chat, url, seconds)
    time.sleep(1.0)  # connected and generating before anything is asked of the pod
    return future


def _url(sandbox: SandboxState, namespace: str, svc: str) -> str:
    return "http://" + address_of(sandbox.run_dir, namespace, svc, 80)


def test_drain_waits_for_a_long_generation_by_the_servers_metrics(
    sandbox: SandboxState, kube: Kube, seeded: str
) -> None:
    with ThreadPoolExecutor(1) as pool:
        future = _start_long_chat(pool, _url(sandbox, seeded, "clef-serve"), 6.0)
        found = drain(kube, seeded, "clef-serve", "clef-serve")
        drained_at = time.monotonic()
        result, ended = future.result(timeout=60)
    assert result.done and result.finish_reason == "length", result
    assert found is not None and found.signal == "vllm:num_requests_running", found
    assert found.left == 0 and 2.0 < found.waited_s < found.bound_s, found
    assert drained_at >= ended - 1.0, (drained_at, ended)  # not before the stream ended
    # Nothing in flight: nothing to wait for.
    idle = drain(kube, seeded, "clef-serve", "clef-serve")
    assert idle is not None and idle.left == 0 and idle.waited_s < 2.0, idle


@pytest.mark.slow  # the drain by metrics runs by default
def test_a_server_without_metrics_is_drained_by_its_connections(
    sandbox: SandboxState, kube: Kube, seeded: str
) -> None:
    with ThreadPoolExecutor(1) as pool:
        future = _start_long_chat(pool, _url(sandbox, seeded, "coder-predictor"), 6.0)
        found = drain(kube, seeded, "coder-predictor", "candle-vllm")
        drained_at = time.monotonic()
        result, ended = future.result(timeout=60)
    assert result.done, result
    assert found is not None and found.signal == CONNECTIONS, found
    assert "no /metrics on port 8080 (HTTP 404)" in found.detail, found
    assert found.left == 0 and 2.0 < found.waited_s < found.bound_s, found
    assert drained_at >= ended - 1.0, (drained_at, ended)
