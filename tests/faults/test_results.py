"""Cells ending at once in two pytest-xdist workers merge into one results file."""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tests.faults import results


def _merge_one(path: str, index: int) -> None:
    results.merge(Path(path), {"fault": f"fault {index}", "step": "gates"})


def test_rows_merged_by_concurrent_processes_are_all_kept(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    with ProcessPoolExecutor(max_workers=6) as pool:
        list(pool.map(_merge_one, [str(path)] * 120, range(120)))
    rows = json.loads(path.read_text())["cells"]
    assert sorted(r["fault"] for r in rows) == sorted(f"fault {i}" for i in range(120))


def test_a_merged_row_replaces_the_same_cell_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    results.merge(path, {"fault": "a", "step": "gates", "outcome": "stopped"})
    results.merge(path, {"fault": "b", "step": "gates", "outcome": "done"})
    results.merge(path, {"fault": "a", "step": "gates", "outcome": "done"})
    rows = {(r["fault"], r["outcome"]) for r in results.load(path)}
    assert rows == {("a", "done"), ("b", "done")}
