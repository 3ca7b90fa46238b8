"""The README's fault-matrix table is the rendering of the committed results file."""

from __future__ import annotations

from tests.faults.results import COMMITTED, load
from tests.faults.table import BEGIN, END, README, render, with_table


def test_the_readme_table_is_the_rendering_of_the_recorded_results() -> None:
    readme = README.read_text()
    assert BEGIN in readme and END in readme
    expected = with_table(readme, render(load(COMMITTED)))
    assert readme == expected, (
        "README.md's fault-matrix table differs from tests/faults/results.json: "
        "run `uv run --frozen python -m tests.faults.table --readme`"
    )


def test_every_recorded_cell_is_in_the_table() -> None:
    rows = load(COMMITTED)
    table = render(rows)
    assert rows, "no recorded results"
    for row in rows:
        assert f"| {row['fault']} | {row['step']} | {row['outcome']} |" in table
