"""Model-server calibration: target vs achieved decode step time per profile, from ground truth.

For each profile, starts a simulated model server with a ground-truth file, runs 1 and then
16 concurrent streams of fixed-length greedy completions, and prints the mean decode step
(gaps between a request's consecutive token send times, inside the window where every
stream runs) against the profile's target, plus the mean TTFT (server side: first token sent
minus request received) against the profile's calibration (prompts of
CALIBRATION_PROMPT_TOKENS tokens, the first of 16 prefilled alone and the other 15 together).
For `cadence` it also prints the jitter |gap - interval| p50/p99/max at 64 streams.

    uv run python benchmarks/modelserver_steps.py [--tokens 48] [--profiles a,b]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import numpy as np

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


def level_row(profile: str, streams: int, records: list[RequestTiming]) -> str:
    spec = PROFILES[profile]
    step_target, step = spec.step_ms(streams), steady_gaps_ms(records).mean()
    ttft_target, ttft = calibrated_ttft_ms(spec, streams), ttft_ms(records)
    cells = [f"{step_target:.2f}", f"{step:.2f}", f"{step / step_target:.4f}"]
    cells += [f"{ttft_target:.1f}", f"{ttft:.1f}", f"{ttft / ttft_target:.3f}"]
    return ROW.format(profile, streams, *cells)


def measure(profile: str, tokens: int, workdir: Path) -> None:
    truth = workdir / f"{profile}.jsonl"
    spec = PROFILES[profile]
    with launched(ServerConfig(profile=profile, port=0, ground_truth=truth)) as server:
        for streams in LEVELS:
            print(level_row(profile, streams, run_level(server, truth, streams, tokens)))
        if spec.batching == "cadence":
            jitter = jitter_ms(run_level(server, truth, 64, 2 * tokens), spec.step_ms_1)
            p50, p99, top = np.quantile(jitter, [0.5, 0.99, 1.0])
            print(
                f"{'':<20} {64:>7}   jitter |gap-{spec.step_ms_1:g}| ms: "
                f"p50 {p50:.3f}  p99 {p99:.3f}  max {top:.3f}  ({len(jitter)} gaps)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48, help="completion tokens per stream")
    parser.add_argument("--profiles", default=",".join(PROFILES), help="comma-separated")
    args = parser.parse_args()
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
    with tempfile.TemporaryDirectory() as tmp:
        for profile in args.profiles.split(","):
            measure(profile, args.tokens, Path(tmp))


if __name__ == "__main__":
    main()
