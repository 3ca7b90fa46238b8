"""How the performance page writes figures, tables and where they came from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmarks.record import RESULTS, ROOT, Provenance


def num(value: float | None) -> str:
    """About three significant digits, no exponent; "—" where nothing was measured."""
    if value is None:
        return "—"
    size = abs(value)
    digits = 0 if size >= 100 else 1 if size >= 10 else 2 if size >= 1 else 3
    return f"{value:.{digits}f}".replace("-", "−")


def load(value: float) -> str:
    """A load average, as /proc/loadavg writes it."""
    return f"{value:.2f}"


def n_streams(count: int) -> str:
    return f"{count} stream" + ("" if count == 1 else "s")


def share(count: int, total: int) -> str:
    return f"{100 * count / total:.0f} % ({count}/{total})"


def span(values: list[float], write: Callable[[float], str] = num) -> str:
    low, high = min(values), max(values)
    return write(low) if write(low) == write(high) else f"{write(low)}–{write(high)}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def origin(path: Path, source: Provenance) -> str:
    """Where a record's figures came from: file, command, commit, date, machine."""
    loads = " / ".join(f"{value:.2f}" for value in source.load_start)
    text = (
        f"From `{RESULTS.relative_to(ROOT) / path.name}`: `{source.command}` "
        f"at commit `{source.commit[:10]}`, "
        f"{source.date:%Y-%m-%d %H:%M} UTC, on {source.cpus} cores (Python {source.python}), "
        f"load average {loads} (1 / 5 / 15 min) at the start."
    )
    if source.dirty_files is None:
        return text + " The tree was not checked against that commit."
    if source.dirty_files:
        return text + f" Measured code changed since the commit: {', '.join(source.dirty_files)}."
    return text
