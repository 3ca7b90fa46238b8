"""The client-accuracy tables: httpx → native at each level of one `--compare` run."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from benchmarks.schemas import AccuracyLevel, ClientAccuracyRecord, read
from benchmarks.tables.text import load, n_streams, num, origin, span, table

TRANSPORTS = ("httpx", "native")  # old → new


@dataclass(frozen=True)
class Target:
    """What the native transport should reach on a quiet machine."""

    metric: str
    streams: int
    most: float
    unit: str
    what: str


TARGETS = (
    Target("gap_p99", 16, 0.35, "ms", "gap error p99"),
    Target("gap_p99", 64, 0.7, "ms", "gap error p99"),
    Target("tpot_p99", 16, 0.03, "ms", "TPOT error p99"),
    Target("ttft_p99", 16, 1.5, "ms", "TTFT error p99"),
    Target("cpu_1k", 64, 0.07, "s", "client CPU per 1000 tokens"),
    # saturation: the client a whole token interval (25 ms) behind the server's sends
    Target("lag_p50", 256, 25.0, "ms", "delivery lag p50 (no saturation)"),
)
RATIOS = (("gap_p99", "gap error p99"), ("ttft_p99", "TTFT error p99"), ("cpu_1k", "CPU"))


def _by_streams(record: ClientAccuracyRecord) -> dict[int, dict[str, AccuracyLevel]]:
    ordered = sorted(record.levels, key=lambda level: level.streams)
    return {
        count: {level.transport: level for level in levels}
        for count, levels in groupby(ordered, key=lambda level: level.streams)
    }


def _cell(levels: list[AccuracyLevel], *metrics: str) -> str:
    """One figure (or "a / b") per transport, old → new."""
    parts = [" / ".join(num(getattr(level, m)) for m in metrics) for level in levels]
    return " → ".join(parts)


def _row(count: int, pair: dict[str, AccuracyLevel]) -> list[str]:
    levels = [pair[t] for t in TRANSPORTS if t in pair]
    return [
        str(count),
        " → ".join(level.transport for level in levels),
        _cell(levels, "ttft_mean", "ttft_p99"),
        _cell(levels, "gap_p99"),
        _cell(levels, "tpot_p99"),
        _cell(levels, "lag_p50", "lag_p99"),
        _cell(levels, "srv_p99"),
        _cell(levels, "cpu_1k"),
        " → ".join(load(level.load_1m) for level in levels),
        " → ".join(f"{level.other_pct:.0f}" for level in levels),
    ]


def _targets(native: dict[int, AccuracyLevel]) -> str:
    parts, met = [], 0
    for target in TARGETS:
        level = native.get(target.streams)
        value = getattr(level, target.metric) if level else None
        ok = value is not None and value <= target.most
        met += ok
        verdict = "not measured" if value is None else "met" if ok else "**not met**"
        parts.append(
            f"{target.what} ≤ {target.most:g} {target.unit} at {n_streams(target.streams)} "
            f"({num(value)}: {verdict})"
        )
    return f"Targets for the native transport, {met} of {len(TARGETS)} met: " + "; ".join(parts)


def _ratios(pairs: dict[int, dict[str, AccuracyLevel]]) -> str | None:
    both = {s: pair for s, pair in pairs.items() if set(TRANSPORTS) <= set(pair)}
    if not both:
        return None
    parts = []
    for metric, what in RATIOS:
        ratios = []
        for pair in both.values():
            old, new = getattr(pair["httpx"], metric), getattr(pair["native"], metric)
            ratios.append("—" if not (old and new) else f"{num(abs(old) / abs(new))}×")
        parts.append(f"{what} {' / '.join(ratios)}")
    levels = " / ".join(str(s) for s in both)
    return f"Same-run ratios httpx / native (> 1: native better) at {levels} streams: " + (
        "; ".join(parts) + "."
    )


def render(path: Path) -> str:
    record = read(path, ClientAccuracyRecord)
    pairs = _by_streams(record)
    header = [
        "streams",
        "transport",
        "TTFT err mean / p99",
        "gap err p99",
        "TPOT err p99",
        "delivery lag p50 / p99",
        "server lateness p99",
        "CPU",
        "load average after the level",
        "other processes' CPU %",
    ]
    pinned = "server on CPU 1, client on CPU 2" if record.pinned else "no pinning"
    loads = span([level.load_1m for level in record.levels], load)
    others = span([level.other_pct for level in record.levels], lambda v: f"{v:.0f}")
    lines = [
        origin(path, record.provenance),
        f"{record.max_tokens}-token streams, {pinned}; load average {loads} after the levels, "
        f"other processes {others} % of the CPU during them.",
        "",
        table(header, [_row(count, pair) for count, pair in pairs.items()]),
        "",
        _targets({s: pair["native"] for s, pair in pairs.items() if "native" in pair}) + ".",
    ]
    ratios = _ratios(pairs)
    if ratios:
        lines += ["", ratios]
    return "\n".join(lines)
