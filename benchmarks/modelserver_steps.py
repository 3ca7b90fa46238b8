"""Model-server calibration: target vs achieved decode step time per profile, from ground truth.

For each profile, starts a simulated model server with a ground-truth file, runs 1 and then
16 concurrent streams of fixed-length greedy completions, and prints the mean decode step
(gaps between a request's consecutive token send times, inside the window where every
stream runs) against the profile's target, plus the mean TTFT (server side: first token sent
minus request received) against the profile's calibration (prompts of
CALIBRATION_PROMPT_TOKENS tokens, the first of 16 prefilled alone and the other 15 together).
For `cadence` it also prints the jitter |gap - interval| p50/p99/max at 64 streams.

    uv run python benchmarks/modelserver_steps.py [--tokens 48] [--profiles a,b]
        [--record benchmarks/results/modelserver_steps_quiet.json]

`--record PATH` writes the figures with their provenance (benchmarks/record.py) for
docs/performance.md (`python -m benchmarks.tables --docs`).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.record import load_1m, provenance, write
from benchmarks.schemas import Jitter, ModelServerStepsRecord, StepLevel
from sandbox.modelserver import PROFILES, Profile, ServerConfig
from sandbox.modelserver.api.groundtruth import RequestTiming, read_ground_truth
from sandbox.modelserver.drive import load_body, run_streams
from sandbox.modelserver.launch import ServerProcess, launched
from sandbox.modelserver.profiles import CALIBRATION_PROMPT_TOKENS
from sandbox.modelserver.timing import jitter_ms, steady_gaps_ms

LEVELS = (1, 16)
ROW = "{:<20} {:>7} {:>10} {:>10} {:>7} {:>12} {:>10} {:>7}"
PROMPT = ("Calibrate the step time. " * 8)[:CALIBRATION_PROMPT_TOKENS]


def run_level(server: ServerProcess, truth: Path, streams: int, tokens: int) -> list[RequestTiming]:
    truth.write_text("")
    bodies = [load_body(max_tokens=tokens, prompt=PROMPT)] * streams
    results = asyncio.run(run_streams(server.base_url, bodies))
    if not all(r.done and r.token_events == tokens for r in results):
        raise RuntimeError(f"{server.config.profile}: a stream at {streams} ended early")
    return read_ground_truth(truth)


def ttft_ms(records: list[RequestTiming]) -> float:
    return float(np.mean([(r.token_times_ns[0] - r.t_recv_ns) / 1e6 for r in records]))


def calibrated_ttft_ms(spec: Profile, streams: int) -> float:
    if spec.batching == "cadence":
        return spec.step_ms_1
    alone = spec.prefill_ms(CALIBRATION_PROMPT_TOKENS)
    together = alone + spec.prefill_ms(CALIBRATION_PROMPT_TOKENS * (streams - 1))
    return (alone + (streams - 1) * together) / streams


def level_figures(profile: str, streams: int, records: list[RequestTiming]) -> StepLevel:
    spec = PROFILES[profile]
    return StepLevel(
        profile=profile,
        streams=streams,
        step_target_ms=spec.step_ms(streams),
        step_ms=round(float(steady_gaps_ms(records).mean()), 4),
        ttft_target_ms=round(calibrated_ttft_ms(spec, streams), 2),
        ttft_ms=round(ttft_ms(records), 2),
        load_1m=load_1m(),
    )


def level_row(level: StepLevel) -> str:
    step, ttft = level.step_ms / level.step_target_ms, level.ttft_ms / level.ttft_target_ms
    cells = [f"{level.step_target_ms:.2f}", f"{level.step_ms:.2f}", f"{step:.4f}"]
    cells += [f"{level.ttft_target_ms:.1f}", f"{level.ttft_ms:.1f}", f"{ttft:.3f}"]
    return ROW.format(level.profile, level.streams, *cells)


def measure(profile: str, tokens: int, workdir: Path) -> tuple[list[StepLevel], list[Jitter]]:
    truth = workdir / f"{profile}.jsonl"
    spec = PROFILES[profile]
    levels, jitters = [], []
    with launched(ServerConfig(profile=profile, port=0, ground_truth=truth)) as server:
        for streams in LEVELS:
            level = level_figures(profile, streams, run_level(server, truth, streams, tokens))
            print(level_row(level))
            levels.append(level)
        if spec.batching == "cadence":
            jitter = jitter_ms(run_level(server, truth, 64, 2 * tokens), spec.step_ms_1)
            p50, p99, top = (round(float(q), 4) for q in np.quantile(jitter, [0.5, 0.99, 1.0]))
            jitters.append(
                Jitter(
                    profile=profile,
                    streams=64,
                    interval_ms=spec.step_ms_1,
                    p50_ms=p50,
                    p99_ms=p99,
                    max_ms=top,
                    gaps=len(jitter),
                    load_1m=load_1m(),
                )
            )
            print(
                f"{'':<20} {64:>7}   jitter |gap-{spec.step_ms_1:g}| ms: "
                f"p50 {p50:.3f}  p99 {p99:.3f}  max {top:.3f}  ({len(jitter)} gaps)"
            )
    return levels, jitters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48, help="completion tokens per stream")
    parser.add_argument("--profiles", default=",".join(PROFILES), help="comma-separated")
    parser.add_argument("--record", type=Path, help="write the figures and their provenance")
    args = parser.parse_args()
    origin = provenance() if args.record else None  # the load before the run's own
    print(
        ROW.format(
            "profile",
            "streams",
            "step target",
            "step ms",
            "ratio",
            "TTFT target",
            "TTFT ms",
            "ratio",
        )
    )
    levels, jitters = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for profile in args.profiles.split(","):
            measured, jitter = measure(profile, args.tokens, Path(tmp))
            levels += measured
            jitters += jitter
    if args.record and origin is not None:
        steps = ModelServerStepsRecord(
            provenance=origin, tokens=args.tokens, levels=levels, jitter=jitters
        )
        write(args.record, steps)


if __name__ == "__main__":
    main()
