"""The latency gate's false alarms and detections: one run's every cell, and runs under
bursts of CPU load side by side (rounds against single requests as the bootstrap's unit)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.schemas import LatencyPowerRecord, PowerCell, PowerLevel, read
from benchmarks.tables.text import load, n_streams, num, origin, share, table


def _sides(record: LatencyPowerRecord) -> str:
    slower = f"{100 * record.slower_by:g} %"
    if record.engine == "llamacpp":
        threads = f"{record.threads} thread{'' if record.threads == 1 else 's'} each"
        return (
            f"llama.cpp servers (llama-cpp-python) of SmolLM2-135M-Instruct `{record.profile}`, "
            f"{threads} (a baseline, an identical twin in its own process, the same engine "
            f"whose every token waits {slower} of the work it took)"
        )
    return f"`{record.profile}` servers (a baseline, an identical twin, one {slower} slower)"


def _setup(record: LatencyPowerRecord) -> str:
    trials = sorted({cell.trials for level in record.levels for cell in level.cells})
    hogs = f"{record.bursts} bursty CPU hogs beside the servers" if record.bursts else "no hogs"
    margins = (
        "; margins " + ", ".join(f"{name} {value:g}" for name, value in record.margins.items())
        if record.margins
        else ""
    )
    return (
        f"{_sides(record)}, "
        f"{record.collect_rounds} rounds measured a side, {hogs}; "
        f"{' / '.join(map(str, trials))} trials a cell{margins}."
    )


def _medians(level: PowerLevel) -> str:
    """Each side's median TPOT and TTFT, and the twin's and the slower side's against the
    baseline's: the slowdown measured, beside the one asked for."""
    parts = []
    for name, medians in (("TPOT", level.tpot_ms), ("TTFT", level.ttft_ms)):
        if medians is None:
            continue
        base = medians["baseline"]
        parts.append(
            f"median {name} {num(base)} ms, twin ×{medians['twin'] / base:.3f}, "
            f"slower ×{medians['slow'] / base:.3f}"
        )
    return f" ({'; '.join(parts)})" if parts else ""


def _levels(record: LatencyPowerRecord) -> str:
    return "; ".join(
        f"{n_streams(level.streams)}: {level.requests_per_round} requests a round, "
        f"{num(level.round_s)} s a round{_medians(level)}, load average "
        f"{load(level.load_1m)} after measuring"
        for level in record.levels
    )


def _outcomes(passes: int | None, fails: int, trials: int) -> str:
    """Pass / no verdict shares of one side's trials (the fails are their own column)."""
    if passes is None:
        return "—"
    return f"{_percent(passes, trials)} / {_percent(trials - passes - fails, trials)}"


def render_run(path: Path) -> str:
    """Every cell of one run; where passes were counted, how the trials that did not fail
    ended (a pass, or no verdict)."""
    record = read(path, LatencyPowerRecord)
    counted = any(cell.twin_passes is not None for level in record.levels for cell in level.cells)
    header = ["streams", "rounds", "design", "unit", "false alarms", "detection"]
    if counted:
        header += ["twin: pass / no verdict", "slower: pass / no verdict"]
    header += ["rounds used, twin / slow", "s per level"]
    rows = []
    for level in record.levels:
        for cell in level.cells:
            row = [
                str(level.streams),
                str(cell.rounds),
                cell.design,
                cell.unit,
                share(cell.false_alarms, cell.trials),
                share(cell.detections, cell.trials),
            ]
            if counted:
                row += [
                    _outcomes(cell.twin_passes, cell.false_alarms, cell.trials),
                    _outcomes(cell.slow_passes, cell.detections, cell.trials),
                ]
            row += [
                f"{num(cell.rounds_used_twin)} / {num(cell.rounds_used_slow)}",
                num(cell.seconds_per_level),
            ]
            rows.append(row)
    lines = [origin(path, record.provenance), f"{_setup(record)} {_levels(record)}."]
    return "\n".join([*lines, "", table(header, rows)])


def render_each(paths: list[Path]) -> str:
    """Runs of different settings, one after another, each with every cell."""
    return "\n\n".join(render_run(path) for path in paths)


def _pair(
    record: LatencyPowerRecord, streams: int, rounds: int, design: str
) -> dict[str, PowerCell]:
    level = next(level for level in record.levels if level.streams == streams)
    return {c.unit: c for c in level.cells if c.rounds == rounds and c.design == design}


def _percent(count: int, trials: int) -> str:
    return f"{100 * count / trials:.0f} %"


def render_runs(paths: list[Path]) -> str:
    """Runs of the same settings side by side: whole rounds against single requests."""
    records = [read(path, LatencyPowerRecord) for path in paths]
    first = records[0]
    keys = [
        (level.streams, cell.rounds, cell.design)
        for level in first.levels
        for cell in level.cells
        if cell.unit == "round"
    ]
    runs = range(1, len(records) + 1)
    header = ["streams", "rounds", "design"]
    header += [f"false alarms, rounds vs requests: run {n}" for n in runs]
    header += [
        "detection, rounds vs requests (rounds used): " + " / ".join(f"run {n}" for n in runs)
    ]
    rows = []
    for streams, rounds, design in keys:
        pairs = [_pair(record, streams, rounds, design) for record in records]
        alarms = [
            f"{_percent(p['round'].false_alarms, p['round'].trials)} vs "
            f"{_percent(p['request'].false_alarms, p['request'].trials)}"
            for p in pairs
        ]
        detections = [
            f"{_percent(p['round'].detections, p['round'].trials)} vs "
            f"{_percent(p['request'].detections, p['request'].trials)}"
            + (
                f" ({num(p['round'].rounds_used_slow)} vs {num(p['request'].rounds_used_slow)})"
                if design == "sequential"
                else ""
            )
            for p in pairs
        ]
        rows.append([str(streams), str(rounds), design, *alarms, " / ".join(detections)])
    lines = [
        f"- Run {n}. {origin(path, record.provenance)} {_levels(record)}."
        for n, path, record in zip(runs, paths, records, strict=True)
    ]
    lines += ["", _setup(first), "", table(header, rows), "", _identical(records)]
    return "\n".join(lines)


def _identical(records: list[LatencyPowerRecord]) -> str:
    """How long an identical candidate took, and what its remaining false alarms were on."""
    parts = []
    for n, record in enumerate(records, 1):
        level = record.levels[-1]
        longest = max(cell.rounds for cell in level.cells)
        pair = _pair(record, level.streams, longest, "sequential")
        metrics = {
            unit: ", ".join(f"{m} {k}" for m, k in cell.false_alarm_metrics.items()) or "none"
            for unit, cell in pair.items()
        }
        parts.append(
            f"run {n}: {num(pair['round'].rounds_used_twin)} rounds on average, its false "
            f"alarms on {metrics['round']} (rounds) against {metrics['request']} (requests)"
        )
    return (
        "The identical twin at the most sequential rounds, whole rounds drawn: "
        + "; ".join(parts)
        + "."
    )
