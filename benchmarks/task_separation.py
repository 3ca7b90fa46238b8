"""Task-suite scores on a real engine: does `manifests/tasks/smollm2-facts.yaml` separate a
correct model from the zeroed key band?

Runs llama.cpp (llama-cpp-python's server, SmolLM2-135M-Instruct) in F16 as the live
baseline and each candidate beside it (F16 itself, the shipped Q4_1, Q4_1 with the zeroed
key band), runs the task gate with the default rule against each, and prints both scores
with their intervals, the cases lost and gained, the exact McNemar p-value and the verdict,
with the machine's load.

    uv run python benchmarks/task_separation.py [--suite FILE]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from gates.task.gate import run_task
from gates.task.suite import load_suite
from sandbox.engines.llamacpp import LlamaServer, Variant

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "manifests" / "tasks" / "smollm2-facts.yaml"
CANDIDATES: list[tuple[str, Variant]] = [
    ("F16 (itself)", "f16"),
    ("Q4_1", "q4_1"),
    ("Q4_1 with the zeroed key band", "q4_1-zkb"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, default=SUITE)
    suite = load_suite(parser.parse_args().suite)
    print(f"suite {suite.name}: {len(suite.cases)} cases; load average {os.getloadavg()}")
    print("| candidate (baseline: live F16) | baseline % | candidate % (95 % Wilson) | lost "
          "| gained | exact McNemar p | verdict |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as logs, LlamaServer("f16", log_dir=Path(logs)) as live:
        for name, variant in CANDIDATES:
            if variant == "f16":
                result = run_task(live.url, suite, baseline_url=live.url)
            else:
                with LlamaServer(variant, log_dir=Path(logs)) as candidate:
                    result = run_task(candidate.url, suite, baseline_url=live.url)
            f = result.figures
            b, c = f.baseline_score, f.candidate_score
            assert b is not None and c is not None
            print(
                f"| {name} | {b.point:.1f} | {c.point:.1f} ({c.low:.1f}–{c.high:.1f}) | "
                f"{f.lost} | {f.gained} | {f.p_value:.4g} | {result.verdict} |"
            )
            for flip in f.flips:
                print(f"    {flip.direction} {flip.case_id}: F16 {flip.baseline_answer!r}, "
                      f"candidate {flip.candidate_answer!r}")  # fmt: skip
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
