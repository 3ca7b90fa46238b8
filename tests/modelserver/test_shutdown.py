"""SIGTERM drains like a well-behaved server: requests already streaming run to their last
token and [DONE], new requests (and /health) get 503 meanwhile, and the process exits 0."""

from __future__ import annotations

import asyncio

import httpx

from sandbox.modelserver import ServerConfig
from sandbox.modelserver.api.groundtruth import read_ground_truth
from sandbox.modelserver.drive import StreamResult, load_body, run_streams
from sandbox.modelserver.launch import start

STREAMS = 16
TOKENS = 60


def test_sigterm_lets_sixteen_open_streams_finish(tmp_path) -> None:  # type: ignore[no-untyped-def]
    truth = tmp_path / "truth.jsonl"
    server = start(ServerConfig(profile="cadence", port=0, cadence_ms=10.0, ground_truth=truth))
    refused: list[int] = []

    async def scenario() -> list[StreamResult]:
        started: set[int] = set()
        all_started = asyncio.Event()

        def on_event(result: StreamResult) -> None:
            if result.token_events:
                started.add(id(result))
            if len(started) == STREAMS:
                all_started.set()

        streams = asyncio.create_task(
            run_streams(
                server.base_url, [load_body(max_tokens=TOKENS)] * STREAMS, on_event=on_event
            )
        )
        await asyncio.wait_for(all_started.wait(), 30)
        server.proc.terminate()  # SIGTERM
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
            for _ in range(50):  # until the signal has been handled
                health = await client.get("/health")
                if health.status_code == 503:
                    break
                await asyncio.sleep(0.01)
            late = await client.post("/v1/completions", json=load_body(max_tokens=1))
            refused.extend([health.status_code, late.status_code])
        return await streams

    results = asyncio.run(scenario())
    assert server.proc.wait(30) == 0
    assert refused == [503, 503]
    assert all(r.done and r.token_events == TOKENS and r.finish_reason == "length" for r in results)
    records = read_ground_truth(truth)
    assert sorted(r.n_out for r in records if r.stream) == [TOKENS] * STREAMS
