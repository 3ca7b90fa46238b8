"""The simulated model server's decode step and TTFT against its profiles' targets."""

from __future__ import annotations

from pathlib import Path

from benchmarks.schemas import ModelServerStepsRecord, read
from benchmarks.tables.text import load, n_streams, num, origin, table


def _off(value: float, target: float) -> float:
    return 100 * abs(value / target - 1)


def render(path: Path) -> str:
    record = read(path, ModelServerStepsRecord)
    header = ["profile", "streams", "step target ms", "step ms", "TTFT target ms", "TTFT ms"]
    header += ["load average"]
    rows = [
        [
            f"`{level.profile}`",
            str(level.streams),
            num(level.step_target_ms),
            num(level.step_ms),
            num(level.ttft_target_ms),
            num(level.ttft_ms),
            load(level.load_1m),
        ]
        for level in record.levels
    ]
    worst_step = max(record.levels, key=lambda lv: _off(lv.step_ms, lv.step_target_ms))
    worst_ttft = max(record.levels, key=lambda lv: _off(lv.ttft_ms, lv.ttft_target_ms))
    lines = [
        origin(path, record.provenance),
        f"{record.tokens}-token greedy completions, 1 and 16 streams.",
        "",
        table(header, rows),
        "",
        f"Mean decode step within {_off(worst_step.step_ms, worst_step.step_target_ms):.2f} % "
        f"of its target at every profile and level (furthest: `{worst_step.profile}` at "
        f"{n_streams(worst_step.streams)}); mean TTFT within "
        f"{_off(worst_ttft.ttft_ms, worst_ttft.ttft_target_ms):.1f} % of its calibration "
        f"(furthest: `{worst_ttft.profile}` at {n_streams(worst_ttft.streams)}).",
    ]
    for jitter in record.jitter:
        lines.append(
            f"`{jitter.profile}` at {n_streams(jitter.streams)}, server-side jitter "
            f"|gap − {num(jitter.interval_ms)} ms|: p50 {num(jitter.p50_ms)} ms, "
            f"p99 {num(jitter.p99_ms)} ms, max {num(jitter.max_ms)} ms ({jitter.gaps} gaps; "
            f"load average {load(jitter.load_1m)})."
        )
    return "\n".join(lines)
