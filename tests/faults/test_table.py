"""The fault-matrix table of docs/faults.md is the rendering of the committed results file."""

from __future__ import annotations

from tests.faults.results import COMMITTED, load
from tests.faults.table import PAGE, STALE, render, table_in, unmarked


def test_the_docs_table_is_the_rendering_of_the_recorded_results() -> None:
    """Its stale marks aside: they follow the commits made since the rendering."""
    assert unmarked(table_in(PAGE.read_text())) == render(load(COMMITTED)), (
        "docs/faults.md's fault-matrix table differs from tests/faults/results.json: "
        "run `uv run --frozen python -m tests.faults.table --docs`"
    )


def test_every_recorded_cell_is_in_the_table_with_its_commit() -> None:
    rows = load(COMMITTED)
    table = render(rows)
    assert rows, "no recorded results"
    for row in rows:
        assert f"| {row['fault']} | {row['step']} |" in table
        if row.get("commit"):
            assert f"`{row['commit'][:10]}`" in table


def test_a_failing_row_is_shown_failing_and_stale_rows_marked() -> None:
    rows = [
        {"fault": "flow SIGKILL", "step": "swap", "result": "fail", "outcome": None,
         "rerun": None, "requests": 10, "failed_requests": 2, "resends": 0,
         "converge_s": None, "load_1min": 3.0, "cpus": 2, "commit": "a" * 40,
         "date": "2026-12-04T15:40:00Z", "failure": "AssertionError: rerun ended | stopped"},
        {"fault": "flow SIGKILL", "step": "scale", "result": "pass", "outcome": "stopped",
         "rerun": "done", "requests": 10, "failed_requests": 0, "resends": 0,
         "converge_s": 80.0, "load_1min": 3.0, "cpus": 2},
    ]  # fmt: skip
    table = render(rows, stale=lambda r: None if r.get("commit") else "names no commit")
    failing, passing = table.splitlines()[-2:]
    assert "**failed** (no outcome): AssertionError: rerun ended \\| stopped" in failing
    assert "`aaaaaaaaaa` | 2026-12-04 15:40 |" in failing and STALE not in failing
    assert passing.endswith(f"| —{STALE} | — |")
    assert "1 of 2 rows older" in table and unmarked(table) == render(rows)
