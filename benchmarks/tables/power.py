"""The latency gate's false alarms and detections: one run's every cell, and runs under
bursts of CPU load side by side (rounds against single requests as the bootstrap's unit)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.schemas import LatencyPowerRecord, PowerCell, read
from benchmarks.tables.text import load, n_streams, num, origin, share, table


def _setup(record: LatencyPowerRecord) -> str:
    trials = sorted({cell.trials for level in record.levels for cell in level.cells})
    hogs = f"{record.bursts} bursty CPU hogs beside the servers" if record.bursts else "no hogs"
    return (
        f"`{record.profile}` servers (a baseline, an identical twin, one 10 % slower), "
        f"{record.collect_rounds} rounds measured a side, {hogs}; "
        f"{' / '.join(map(str, trials))} trials a cell."
    )


def _levels(record: LatencyPowerRecord) -> str:
    return "; ".join(
        f"{n_streams(level.streams)}: {level.requests_per_round} requests a round, "
        f"{num(level.round_s)} s a round, load average {load(level.load_1m)} after measuring"
        for level in record.levels
    )


def render_run(path: Path) -> str:
    """Every cell of one run."""
    record = read(path, LatencyPowerRecord)
    header = ["streams", "rounds", "design", "unit", "false alarms", "detection"]
    header += ["rounds used, twin / slow", "s per level"]
    rows = [
        [
            str(level.streams),
            str(cell.rounds),
            cell.design,
            cell.unit,
            share(cell.false_alarms, cell.trials),
            share(cell.detections, cell.trials),
            f"{num(cell.rounds_used_twin)} / {num(cell.rounds_used_slow)}",
            num(cell.seconds_per_level),
        ]
        for level in record.levels
        for cell in level.cells
    ]
    lines = [origin(path, record.provenance), f"{_setup(record)} {_levels(record)}."]
    return "\n".join([*lines, "", table(header, rows)])


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
