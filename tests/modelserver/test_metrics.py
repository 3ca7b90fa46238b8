"""/metrics of real server processes: vLLM's names while a long generation runs and after
it, llama.cpp's names, none on candle-vllm's surface; a request's simulated duration
(`sandbox_duration_s`) on the server's delay scale."""

from __future__ import annotations

import asyncio
import time

import httpx

from sandbox.modelserver.drive import load_body, stream
from tests.modelserver.conftest import StartServers

# 120 simulated seconds at 0.02 real seconds each: a 2-minute generation in 2.4 s.
DURATION_S = 120.0
SCALE = 0.02


def sample(text: str, name: str) -> float:
    """The value of the first sample of `name` (any labels)."""
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in "{ ":
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name} in:\n{text}")


async def _long_generation(base_url: str) -> tuple[float, list[str]]:
    """The seconds a long stream took, and /metrics read while it ran and after it."""
    body = load_body(max_tokens=40) | {"sandbox_duration_s": DURATION_S, "stream": True}
    begun = time.monotonic()
    task = asyncio.create_task(stream(base_url, "/v1/completions", body))
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        await asyncio.sleep(DURATION_S * SCALE / 2)
        during = (await client.get("/metrics")).text
        result = await task
        took = time.monotonic() - begun
        after = (await client.get("/metrics")).text
    assert result.done and (result.usage or {}).get("completion_tokens") == 40, result
    return took, [during, after]


def test_vllm_metrics_follow_a_long_generation(start_servers: StartServers) -> None:
    (server,) = start_servers(dict(profile="cadence", delay_scale=SCALE))
    took, (during, after) = asyncio.run(_long_generation(server.base_url))
    assert DURATION_S * SCALE <= took < DURATION_S * SCALE + 2.0
    assert sample(during, "vllm:num_requests_running") == 1.0
    assert sample(after, "vllm:num_requests_running") == 0.0
    assert 'vllm:request_success_total{finished_reason="length",model_name="cadence"} 1.0' in after
    assert sample(after, "vllm:time_to_first_token_seconds_count") == 1.0
    assert sample(after, "vllm:time_per_output_token_seconds_count") == 39.0
    assert 'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 1.0' in after
    assert "# TYPE vllm:time_per_output_token_seconds histogram" in after


def test_llamacpp_dialect_and_none(start_servers: StartServers) -> None:
    llama, candle = start_servers(
        dict(profile="cadence", metrics="llamacpp", delay_scale=SCALE),
        dict(profile="clef-flash-candle", surface="candle-vllm"),
    )
    _, (during, after) = asyncio.run(_long_generation(llama.base_url))
    assert sample(during, "llamacpp:requests_processing") == 1.0
    assert sample(after, "llamacpp:requests_processing") == 0.0
    assert sample(after, "llamacpp:tokens_predicted_total") == 40.0
    assert "vllm:" not in after
    assert httpx.get(f"{candle.base_url}/metrics").status_code == 404
