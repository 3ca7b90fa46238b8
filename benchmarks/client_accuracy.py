"""Client accuracy: the gates' streaming client against a `cadence` server's ground truth.

For each concurrency level, runs closed-loop load on the simulated `cadence` model server
(which records the send time of every token, monotonic ns, same clock as `perf_counter_ns`)
and prints, per level, client-minus-server errors:
- per-gap ITL error (`gap`: every gap; `gap2`: from the second gap on, since the first gap
  also carries the first token's delivery delay), TPOT error and TTFT error (TTFT server
  side: first token − request received), p50 and p99, in ms;
- delivery lag: client arrival stamp − server send stamp of the same token;
- the server's own pacing: its gaps minus the cadence interval (`srv`), which tells a server
  that falls behind from a client that does;
- client CPU seconds per 1000 tokens (this process only) and client queue time.

    uv run python benchmarks/client_accuracy.py [--levels 1,16,64,256] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gates.load import RequestShape, Run, StreamPool
from gates.metrics import compute_request_metrics
from gates.records import RequestRecord
from tests.gates.servers import start_server

MS = 1e6
CADENCE_MS = 25.0  # the cadence profile's interval


@dataclass(frozen=True)
class LevelRun:
    concurrency: int
    run: Run
    cpu_s: float
    load_1m: float  # machine load average when the level finished


async def measure(url: str, concurrency: int, *, max_tokens: int, per_stream: int) -> LevelRun:
    shape = RequestShape(model="cadence", max_tokens=max_tokens)
    prompts = ["Calibrate the client."]
    async with StreamPool(url, concurrency=concurrency, read_timeout_s=60) as pool:
        await pool.run(shape, prompts, n_requests=concurrency)  # warm-up: connect, JIT paths
        cpu_start = time.process_time()
        run = await pool.run(shape, prompts, n_requests=per_stream * concurrency)
        cpu_s = time.process_time() - cpu_start
    return LevelRun(concurrency, run, cpu_s, os.getloadavg()[0])


def read_truth(path: Path) -> dict[str, dict]:
    entries = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {str(entry["id"]): entry for entry in entries}


def errors_ms(record: RequestRecord, truth: dict) -> dict[str, list[float]] | None:
    """Client-minus-server errors of one request, or None when it cannot be matched."""
    metrics = compute_request_metrics(record)
    server_times = truth.get("token_times_ns") or []
    if metrics is None or len(server_times) != len(record.token_times_ns):
        return None
    server = np.asarray(server_times, dtype=np.int64)
    client = np.asarray(record.token_times_ns, dtype=np.int64)
    server_tpot = (server[-1] - server[0]) / (len(server) - 1) if len(server) > 1 else 0
    server_ttft = server[0] - truth["t_recv_ns"]
    return {
        "gap": list((np.diff(client) - np.diff(server)) / MS),
        "gap2": list((np.diff(client[1:]) - np.diff(server[1:])) / MS),
        "srv": list(np.diff(server) / MS - CADENCE_MS),
        "tpot": [(metrics.tpot_ms or 0.0) - server_tpot / MS],
        "ttft": [(metrics.ttft_ns - server_ttft) / MS],
        "lag": list((client - server) / MS),
        "queue": [metrics.queue_ns / MS],
    }


def summarise_level(level: LevelRun, truth: dict[str, dict]) -> dict[str, float]:
    pooled: dict[str, list[float]] = {
        key: [] for key in ("gap", "gap2", "srv", "tpot", "ttft", "lag", "queue")
    }
    matched = 0
    for record in level.run.records:
        found = errors_ms(record, truth.get(record.response_id or "", {}))
        if found is not None:
            matched += 1
            for key, values in found.items():
                pooled[key] += values
    tokens = sum(r.n_out or 0 for r in level.run.records if r.ok)
    row = {
        "streams": level.concurrency,
        "requests": len(level.run.records),
        "matched": matched,
        "failed": sum(not r.ok for r in level.run.records),
        "cpu_s_per_1k_tok": level.cpu_s / tokens * 1000 if tokens else float("nan"),
        "load_1m": level.load_1m,
    }
    for key, values in pooled.items():
        array = np.asarray(values) if values else np.array([np.nan])
        row[f"{key}_p50"], row[f"{key}_p99"] = np.percentile(array, [50, 99])
    return row


COLUMNS = [
    "streams",
    "requests",
    "matched",
    "failed",
    "gap_p50",
    "gap_p99",
    "gap2_p50",
    "gap2_p99",
    "srv_p50",
    "srv_p99",
    "tpot_p50",
    "tpot_p99",
    "ttft_p50",
    "ttft_p99",
    "lag_p50",
    "lag_p99",
    "queue_p50",
    "queue_p99",
    "cpu_s_per_1k_tok",
    "load_1m",
]


def print_table(rows: list[dict[str, float]]) -> None:
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"load average now {load} on {os.cpu_count()} cores (other work skews the figures)")
    print("errors are client − server in ms (gap = ITL per gap; lag = arrival − server send)")
    print(" ".join(f"{name:>9}" for name in COLUMNS))
    for row in rows:
        print(
            " ".join(
                f"{row[name]:>9.3f}" if isinstance(row[name], float) else f"{row[name]:>9}"
                for name in COLUMNS
            )
        )


def run_levels(url: str, levels: list[int], args: argparse.Namespace) -> list[LevelRun]:
    return [
        asyncio.run(
            measure(url, c, max_tokens=args.max_tokens, per_stream=args.requests_per_stream)
        )
        for c in levels
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,16,64,256")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--url", help="use this running cadence server instead of starting one")
    parser.add_argument("--ground-truth", type=Path, help="its ground-truth file (with --url)")
    parser.add_argument(
        "--realtime",
        action="store_true",
        help="run the client under SCHED_FIFO (as the server's pacing threads run), so other "
        "work on a shared machine does not delay its wake-ups",
    )
    args = parser.parse_args()
    if args.realtime:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    levels = [int(level) for level in args.levels.split(",")]
    if args.url:
        runs, truth = run_levels(args.url, levels, args), read_truth(args.ground_truth)
    else:
        with tempfile.TemporaryDirectory() as workdir:
            server = start_server("cadence", workdir=Path(workdir), ground_truth=True)
            try:
                runs = run_levels(server.url, levels, args)
            finally:
                server.stop()
            assert server.ground_truth is not None
            truth = read_truth(server.ground_truth)
    print_table([summarise_level(level, truth) for level in runs])


if __name__ == "__main__":
    main()
