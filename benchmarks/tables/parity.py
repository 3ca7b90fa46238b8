"""Parity's checks over benign and harmful variants of a real engine: each check's figure
per variant, the worst benign and mildest harmful figure and the margin between them, and
each variant's verdict under the default tolerances (benchmarks/parity_separation.py)."""

from __future__ import annotations

from itertools import groupby
from pathlib import Path

from benchmarks.schemas import ParityCase, ParitySeparationRecord, read
from benchmarks.tables.text import origin, table


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3g}" if value else "0"


def _cell(text: str) -> str:
    """Text inside a table cell: a bar would end the cell."""
    return text.replace("|", "\\|")


def _margin(worst: float | None, mildest: float | None) -> str:
    if worst is None or mildest is None:
        return "n/a"
    if worst > 0:
        return f"{mildest / worst:.1f}x"
    return "inf" if mildest > 0 else "none"


def tabulate(title: str, cases: list[ParityCase], checks: list[str]) -> str:
    """The checks' table and the verdicts' table of one reference's variants."""
    rows = []
    for check in checks:
        values = [c.figures.get(check) for c in cases]
        if all(v is None for v in values):
            continue  # a check this run did not make (the long-context probes, left out)
        benign = [v for c, v in zip(cases, values, strict=True) if c.kind == "benign"]
        # a harmful variant a check cannot see (a chat template, for teacher forcing) is
        # another check's job: the margin is over the harmful variants it does see
        harmful = [v for c, v in zip(cases, values, strict=True) if c.kind == "harmful" and v]
        seen = [v for v in benign if v is not None]
        worst, mildest = (max(seen) if seen else None), (min(harmful) if harmful else None)
        figures = [*map(_fmt, values), _fmt(worst), _fmt(mildest), _margin(worst, mildest)]
        rows.append([_cell(check), *figures])
    header = ["check", *(_cell(c.name) for c in cases), "benign max", "harmful min", "margin"]
    verdicts = [[_cell(c.name), c.kind, c.verdict, _cell(c.finding[:110])] for c in cases]
    return "\n".join(
        [
            f"#### {title}",
            "",
            table(header, rows),
            "",
            table(["variant", "kind", "verdict", "deciding finding"], verdicts),
        ]
    )


def render(path: Path) -> str:
    record = read(path, ParitySeparationRecord)
    checks = list(dict.fromkeys(name for c in record.cases for name in c.figures))
    probes = "with" if record.long_context else "without"
    parts = [
        origin(path, record.provenance),
        f"Top-{record.top_k} logprobs, {probes} the long-context probes; each variant's "
        "figure under the gate's default tolerances.",
    ]
    for reference, cases in groupby(record.cases, key=lambda c: c.reference):
        parts += ["", tabulate(f"{reference} reference", list(cases), checks)]
    return "\n".join(parts)
