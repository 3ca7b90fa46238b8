"""Latency gate power: false alarms on identical servers and detection of a 10 % slower
candidate, against the measurement budget, for the gate's own decision (fixed and sequential).

1. Measures: three simulated model servers of one profile, a baseline, an identical twin and
   one with every step 10 % slower (`--slowdown 1.1`), under the gate's closed-loop load
   (native transport); `--collect-rounds` interleaved rounds of each at every level.
2. Replays: a trial draws distinct rounds (the same round indices for both sides, in random
   order) and runs the gate's decision (`gates.latency.gate.evaluate_level`, `is_certain`) on
   them exactly as the live gate would at each look. Twin vs baseline: any FAIL is a false
   alarm; slow vs baseline: a FAIL is a detection.
Per level and maximum rounds it prints both rates (and their counts), the mean rounds the
sequential gate used and the seconds a level takes (measured round time × rounds × 2
sides), beside the fixed design that always runs every round; at more than one stream, for
each bootstrap unit (`resample`: whole rounds, the default, and single requests).
`--bursts N` measures beside N processes that alternate 50–600 ms of CPU with 50–500 ms
idle (seeded), the load under which a round-level unit matters.

    uv run python benchmarks/latency_power.py [--levels 1,16] [--collect-rounds 16] [--bursts 8]
        [--record benchmarks/results/latency_power_quiet.json]

`--record PATH` writes the rates with their provenance (benchmarks/record.py) for
docs/performance.md (`python -m benchmarks.tables --docs`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import multiprocessing
import os
import random
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.record import load_1m, provenance, write
from benchmarks.schemas import LatencyPowerRecord, PowerCell, PowerLevel
from gates.common.settings import LatencySettings
from gates.http import api
from gates.latency.gate import BASELINE, CANDIDATE, evaluate_level, is_certain
from gates.latency.load import RequestShape, Run, StreamPool
from tests.gates.servers import start_server

SIDES = ("baseline", "twin", "slow")


@dataclass(frozen=True)
class Collected:
    concurrency: int
    rounds: dict[str, list[Run]]  # side -> one run per round
    round_s: float  # mean seconds of one side's round
    load_1m: float  # after the rounds were measured


async def collect(urls: dict[str, str], concurrency: int, args: argparse.Namespace) -> Collected:
    settings = LatencySettings()
    shapes = {}
    for side, url in urls.items():
        async with api.make_client(url, timeout_s=30) as client:
            model = await api.resolve_model_id(client, None)
        shapes[side] = RequestShape(model=model, max_tokens=settings.max_tokens)
    n_round = settings.requests_per_round(concurrency)
    pools = {
        side: StreamPool(url, concurrency=concurrency, read_timeout_s=60)
        for side, url in urls.items()
    }
    rounds: dict[str, list[Run]] = {side: [] for side in SIDES}
    for pool in pools.values():
        await pool.__aenter__()
    try:
        for side, pool in pools.items():
            await pool.run(shapes[side], settings.prompts, n_requests=concurrency)  # warm-up
        started = time.monotonic()
        for r in range(args.collect_rounds):
            order = SIDES if r % 2 == 0 else SIDES[::-1]
            for side in order:
                run = await pools[side].run(shapes[side], settings.prompts, n_requests=n_round)
                rounds[side].append(run)
        round_s = (time.monotonic() - started) / (args.collect_rounds * len(SIDES))
    finally:
        for pool in pools.values():
            await pool.__aexit__(None, None, None)
    return Collected(concurrency, rounds, round_s, load_1m())


Verdict = tuple[bool, int, tuple[str, ...]]  # failed, rounds used, the metrics that regressed


def decide(
    data: Collected, candidate: str, picks: np.ndarray, settings: LatencySettings
) -> Verdict:
    """The gate's verdict on these rounds."""
    at_look = settings.at_each_look()
    looks = settings.looks()
    for done in looks:
        runs = {
            CANDIDATE: [data.rounds[candidate][i] for i in picks[:done]],
            BASELINE: [data.rounds["baseline"][i] for i in picks[:done]],
        }
        level = evaluate_level(runs, data.concurrency, at_look, rounds=done)
        if done == settings.rounds or is_certain(level, at_look):
            regressed = tuple(c.metric for c in level.comparisons if c.outcome == "regressed")
            return level.passed is False, done, regressed
    raise AssertionError("the last round is always a look")


_COLLECTED: list[Collected] = []  # set before the worker processes fork: nothing to pickle


def trial(job: tuple[int, str, int, bool, str, int]) -> Verdict:
    index, candidate, max_rounds, sequential, resample, seed = job
    data = _COLLECTED[index]
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(data.rounds["baseline"]), size=max_rounds, replace=False)
    settings = LatencySettings(
        rounds=max_rounds, sequential=sequential, resample=resample, bootstrap_resamples=1000
    )
    return decide(data, candidate, picks, settings)


def analyse(index: int, args: argparse.Namespace, pool: ProcessPoolExecutor) -> PowerLevel:
    data = _COLLECTED[index]
    n_round = LatencySettings().requests_per_round(data.concurrency)
    print(f"\n{data.concurrency} streams: {n_round} requests a round, {data.round_s:.2f} s a round")
    print(
        f"{'rounds':>6} {'design':>10} {'unit':>8} {'false alarms':>14} {'detection':>12} "
        f"{'rounds used twin/slow':>22} {'s per level':>12}  false alarms on"
    )
    units = ("round", "request") if data.concurrency > 1 else ("request",)
    cells = []
    for max_rounds, sequential, unit in itertools.product(args.budgets, (False, True), units):
        rates = {}
        for candidate in ("twin", "slow"):
            jobs = [
                (index, candidate, max_rounds, sequential, unit, seed)
                for seed in range(args.trials)
            ]
            rates[candidate] = list(pool.map(trial, jobs, chunksize=4))
        used = [float(np.mean([n for _, n, _ in rates[c]])) for c in ("twin", "slow")]
        alarms = Counter(metric for _, _, metrics in rates["twin"] for metric in metrics)
        cell = PowerCell(
            rounds=max_rounds,
            design="sequential" if sequential else "fixed",
            unit=unit,
            trials=args.trials,
            false_alarms=sum(failed for failed, _, _ in rates["twin"]),
            detections=sum(failed for failed, _, _ in rates["slow"]),
            rounds_used_twin=round(used[0], 2),
            rounds_used_slow=round(used[1], 2),
            seconds_per_level=round(max(used) * data.round_s * 2, 1),
            false_alarm_metrics=dict(alarms.most_common()),
        )
        cells.append(cell)
        fa, det = cell.false_alarms, cell.detections
        print(
            f"{max_rounds:>6} {cell.design:>10} {unit:>8} {fa / args.trials:>8.1%} ({fa:>3}) "
            f"{det / args.trials:>6.1%} ({det:>3}) {used[0]:>10.1f} / {used[1]:<9.1f}"
            f"{cell.seconds_per_level:>12.1f}  "
            f"{', '.join(f'{m} {n}' for m, n in alarms.most_common())}"
        )
    return PowerLevel(
        streams=data.concurrency,
        requests_per_round=n_round,
        round_s=round(data.round_s, 3),
        load_1m=data.load_1m,
        cells=cells,
    )


def burst(seed: int) -> None:
    """CPU for 50-600 ms, idle for 50-500 ms, until killed: load that comes in bursts, at a
    higher priority than the servers where allowed, as a noisy neighbour may be."""
    with contextlib.suppress(PermissionError):
        os.nice(-5)
    rng = random.Random(seed)
    while True:
        busy_until = time.monotonic() + rng.uniform(0.05, 0.6)
        while time.monotonic() < busy_until:
            pass
        time.sleep(rng.uniform(0.05, 0.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="gptq-30b-a3b-tp1")
    parser.add_argument("--levels", default="1,16")
    parser.add_argument("--collect-rounds", type=int, default=16)
    parser.add_argument("--budgets", default="3,6,9,12", help="maximum rounds to evaluate")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--bursts", type=int, default=0, help="bursty CPU hogs while measuring")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--record", type=Path, help="write the rates and their provenance")
    args = parser.parse_args()
    origin = provenance() if args.record else None  # the load before the run's own
    args.budgets = [int(b) for b in args.budgets.split(",")]
    if max(args.budgets) > args.collect_rounds:
        parser.error(
            f"--budgets up to {max(args.budgets)} rounds need at least as many measured: "
            f"--collect-rounds is {args.collect_rounds} (a trial draws distinct rounds)"
        )
    extra = {"baseline": [], "twin": ["--model-id", "twin"], "slow": ["--slowdown", "1.1"]}
    context = multiprocessing.get_context("fork")
    hogs = [context.Process(target=burst, args=(seed,), daemon=True) for seed in range(args.bursts)]
    with tempfile.TemporaryDirectory() as workdir:
        for hog in hogs:
            hog.start()
        servers = {
            side: start_server(args.profile, workdir=Path(workdir), args=extra[side])
            for side in SIDES
        }
        try:
            urls = {side: server.url for side, server in servers.items()}
            levels = [int(level) for level in args.levels.split(",")]
            _COLLECTED.extend(asyncio.run(collect(urls, c, args)) for c in levels)
        finally:
            for server in servers.values():
                server.stop()
            for hog in hogs:
                hog.kill()
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"{args.profile}: {os.cpu_count()} cores, load average {load} after measuring "
        f"({args.bursts} bursty hogs); {args.trials} trials a cell, distinct rounds drawn "
        f"from {args.collect_rounds} measured"
    )
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        analysed = [analyse(index, args, pool) for index in range(len(_COLLECTED))]
    if args.record and origin is not None:
        power = LatencyPowerRecord(
            provenance=origin,
            profile=args.profile,
            collect_rounds=args.collect_rounds,
            bursts=args.bursts,
            levels=analysed,
        )
        write(args.record, power)


if __name__ == "__main__":
    main()
