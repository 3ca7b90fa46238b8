"""Client accuracy: the gates' streaming transports against a truth server's send times.

Starts `sandbox.truthserver` (one token per 25 ms tick from a timerfd, no model, normal
priority, every send time recorded) and runs closed-loop load at each concurrency level;
with `--compare` the previous transport (httpx) and the native one run back to back at every
level of the same run, and the old/new ratios are printed. Errors are client − server, ms:
- `ttft_mean`, `ttft_p99`: TTFT error (client: first token − t_send; server: first token
  sent − request received);
- `gap_p99`: per-gap ITL error, gaps matched by request id; `tpot_p99`: TPOT error;
- `lag_p50`, `lag_p99`: delivery lag, arrival stamp − send stamp of the same token
  (saturation shows here first); `srv_p99`: the server's own lateness against its grid;
- `queue_p99`: time inside the client before the request went out;
- `cpu_1k`: client CPU seconds per 1000 tokens; `load`: 1-minute load average after the
  level; `other%`: CPU used by processes other than client and server during the level, in
  % of the whole machine.
With 4 or more cores the server runs on CPU 1 and the client on CPU 2.

    uv run python benchmarks/client_accuracy.py [--compare] [--levels 1,16,64,256]
        [--record benchmarks/results/client_accuracy_quiet.json]

`--record PATH` writes the figures with their provenance (benchmarks/record.py) for
docs/performance.md (`python -m benchmarks.tables --docs`).
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

import httpx
import numpy as np

from benchmarks.record import Provenance, finite, provenance, write
from benchmarks.schemas import AccuracyLevel, ClientAccuracyRecord
from gates.http.records import RequestRecord
from gates.latency.load import RequestShape, Run, StreamPool, Transport
from gates.latency.metrics import compute_request_metrics
from tests.gates.servers import start_truth_server

MS = 1e6
INTERVAL_MS = 25.0
SERVER_CPU, CLIENT_CPU = 1, 2
COLUMNS = [
    "ttft_mean",
    "ttft_p99",
    "gap_p99",
    "tpot_p99",
    "lag_p50",
    "lag_p99",
    "srv_p99",
    "queue_p99",
    "cpu_1k",
    "load",
    "other%",
]
RATIO_COLUMNS = ["ttft_p99", "gap_p99", "tpot_p99", "lag_p99", "cpu_1k"]


@dataclass(frozen=True)
class LevelRun:
    transport: Transport
    concurrency: int
    run: Run
    cpu_s: float
    load_1m: float
    other_pct: float


def _busy_ticks() -> tuple[int, int]:
    """Busy and total jiffies of the whole machine, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _process_ticks(pid: int) -> int:
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])  # utime + stime


async def measure(
    url: str, transport: Transport, concurrency: int, args: argparse.Namespace, server_pid: int
) -> LevelRun:
    shape = RequestShape(model="truth", max_tokens=args.max_tokens)
    per_stream = max(args.requests_per_stream, -(-args.min_requests // concurrency))
    pool = StreamPool(url, concurrency=concurrency, read_timeout_s=60, transport=transport)
    async with pool:
        await pool.run(shape, ["Calibrate."], n_requests=concurrency)  # warm-up: connect
        cpu_start, busy_start = time.process_time(), _busy_ticks()
        server_start = _process_ticks(server_pid)
        run = await pool.run(shape, ["Calibrate."], n_requests=per_stream * concurrency)
        cpu_s = time.process_time() - cpu_start
        busy_end, server_end = _busy_ticks(), _process_ticks(server_pid)
    hz = os.sysconf("SC_CLK_TCK")
    others = (busy_end[0] - busy_start[0]) - (server_end - server_start) - cpu_s * hz
    other_pct = 100 * max(others, 0) / max(busy_end[1] - busy_start[1], 1)
    return LevelRun(transport, concurrency, run, cpu_s, os.getloadavg()[0], other_pct)


def errors_ms(record: RequestRecord, truth: dict) -> dict[str, list[float]] | None:
    """Client-minus-server errors of one request, or None when it cannot be matched."""
    metrics = compute_request_metrics(record)
    server_times = truth.get("token_times_ns") or []
    if metrics is None or len(server_times) != len(record.token_times_ns):
        return None
    server = np.asarray(server_times, dtype=np.int64)
    client = np.asarray(record.token_times_ns, dtype=np.int64)
    server_tpot = (server[-1] - server[0]) / (len(server) - 1) if len(server) > 1 else 0
    return {
        "gap": list((np.diff(client) - np.diff(server)) / MS),
        "srv": list(np.diff(server) / MS - INTERVAL_MS),
        "tpot": [(metrics.tpot_ms or 0.0) - server_tpot / MS],
        "ttft": [(metrics.ttft_ns - (server[0] - truth["t_recv_ns"])) / MS],
        "lag": list((client - server) / MS),
        "queue": [metrics.queue_ns / MS],
    }


def summarise_level(level: LevelRun, truth: dict[str, dict]) -> dict[str, float]:
    pooled: dict[str, list[float]] = {k: [] for k in ("gap", "srv", "tpot", "ttft", "lag", "queue")}
    matched = 0
    for record in level.run.records:
        found = errors_ms(record, truth.get(record.response_id or "", {}))
        if found is not None:
            matched += 1
            for key, values in found.items():
                pooled[key] += values
    tokens = sum(r.n_out or 0 for r in level.run.records if r.ok)
    arrays = {k: np.asarray(v) if v else np.array([np.nan]) for k, v in pooled.items()}
    row: dict[str, float] = {
        "requests": len(level.run.records),
        "matched": matched,
        "failed": sum(not r.ok for r in level.run.records),
        "ttft_mean": float(np.mean(arrays["ttft"])),
        "cpu_1k": level.cpu_s / tokens * 1000 if tokens else float("nan"),
        "load": level.load_1m,
        "other%": level.other_pct,
    }
    for key in ("ttft", "gap", "tpot", "lag", "srv", "queue"):
        row[f"{key}_p99"] = float(np.percentile(arrays[key], 99))
    row["lag_p50"] = float(np.percentile(arrays["lag"], 50))
    return row


def print_rows(rows: list[tuple[LevelRun, dict[str, float]]], compare: bool) -> None:
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"{os.cpu_count()} cores, load average now {load}; errors client − server in ms")
    head = f"{'transport':>9} {'streams':>7} {'req':>5} {'fail':>4} "
    print(head + " ".join(f"{name:>9}" for name in COLUMNS))
    for level, row in rows:
        cells = " ".join(f"{row[name]:>9.3f}" for name in COLUMNS)
        print(
            f"{level.transport:>9} {level.concurrency:>7} {row['requests']:>5.0f} "
            f"{row['failed']:>4.0f} {cells}"
        )
    if not compare:
        return
    print("\nratios old (httpx) / new (native), same run; > 1: the new transport is better")
    print(f"{'streams':>7} " + " ".join(f"{name:>9}" for name in RATIO_COLUMNS))
    by_key = {(level.transport, level.concurrency): row for level, row in rows}
    for level, new in rows:
        old = by_key.get(("httpx", level.concurrency))
        if level.transport != "native" or old is None:
            continue
        ratios = " ".join(f"{_ratio(old[name], new[name]):>9.2f}" for name in RATIO_COLUMNS)
        print(f"{level.concurrency:>7} {ratios}")


def _ratio(old: float, new: float) -> float:
    return abs(old) / abs(new) if new else float("inf")


def dump(path: Path, runs: list[LevelRun], truth: dict[str, dict]) -> None:
    with path.open("w") as out:
        for level in runs:
            for record in level.run.records:
                server = truth.get(record.response_id or "", {})
                row: dict[str, object] = {"transport": level.transport}
                row |= {"streams": level.concurrency}
                row |= {"client": record.model_dump(), "server": server}
                out.write(json.dumps(row) + "\n")


def to_record(
    rows: list[tuple[LevelRun, dict[str, float]]],
    origin: Provenance,
    args: argparse.Namespace,
    pinned: bool,
) -> ClientAccuracyRecord:
    metrics = ["ttft_mean", "ttft_p99", "gap_p99", "tpot_p99", "lag_p50", "lag_p99"]
    metrics += ["srv_p99", "queue_p99", "cpu_1k"]
    levels = []
    for level, row in rows:
        fields: dict[str, object] = {name: finite(row[name]) for name in metrics}
        fields |= {"transport": level.transport, "streams": level.concurrency}
        fields |= {name: int(row[name]) for name in ("requests", "matched", "failed")}
        fields |= {"load_1m": round(level.load_1m, 2), "other_pct": round(level.other_pct, 1)}
        levels.append(AccuracyLevel.model_validate(fields))
    return ClientAccuracyRecord(
        provenance=origin, max_tokens=args.max_tokens, pinned=pinned, levels=levels
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,16,64,256")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--min-requests", type=int, default=16, help="per level and transport")
    parser.add_argument("--compare", action="store_true", help="httpx and native, same run")
    parser.add_argument("--transport", default="native", choices=["native", "httpx"])
    parser.add_argument("--dump", type=Path, help="write per-request client and server stamps")
    parser.add_argument("--record", type=Path, help="write the figures and their provenance")
    args = parser.parse_args()
    origin = provenance() if args.record else None  # the load before the run's own
    levels = [int(level) for level in args.levels.split(",")]
    transports: list[Transport] = ["httpx", "native"] if args.compare else [args.transport]
    pin = (os.cpu_count() or 1) >= 4
    with tempfile.TemporaryDirectory() as workdir:
        server = start_truth_server(workdir=Path(workdir), cpus={SERVER_CPU} if pin else None)
        if pin:
            os.sched_setaffinity(0, {CLIENT_CPU})
        try:
            runs = [
                asyncio.run(measure(server.url, transport, c, args, server.process.pid))
                for c in levels
                for transport in transports
            ]
            lines = httpx.get(f"{server.url}/truth", timeout=30).text.splitlines()
        finally:
            server.stop()
    truth = {entry["id"]: entry for entry in map(json.loads, lines)}
    if args.dump:
        dump(args.dump, runs, truth)
    rows = [(level, summarise_level(level, truth)) for level in runs]
    print_rows(rows, args.compare)
    if args.record and origin is not None:
        write(args.record, to_record(rows, origin, args, pin))


if __name__ == "__main__":
    main()
