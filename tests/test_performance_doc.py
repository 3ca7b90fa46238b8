"""docs/performance.md's tables are the rendering of the committed benchmark records
(benchmarks/results, written with each benchmark's `--record`), and no table is typed by
hand: `uv run --frozen python -m benchmarks.tables --docs` rewrites the page's blocks."""

from __future__ import annotations

import difflib
import json
import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel

from benchmarks.record import RESULTS, ROOT
from benchmarks.schemas import (
    ClientAccuracyRecord,
    LatencyPowerRecord,
    ModelServerStepsRecord,
    ParitySeparationRecord,
    read,
)
from benchmarks.tables import BLOCKS, PAGE, block_in, outside_blocks, rendering

SCHEMAS: dict[str, type[BaseModel]] = {
    "client_accuracy": ClientAccuracyRecord,
    "latency_power": LatencyPowerRecord,
    "modelserver_steps": ModelServerStepsRecord,
    "parity_separation": ParitySeparationRecord,
}
RECORDS = sorted(RESULTS.glob("*.json"))
REGENERATE = "run `uv run --frozen python -m benchmarks.tables --docs`"


def test_each_block_is_the_rendering_of_its_records() -> None:
    page, texts = PAGE.read_text(), rendering()
    for block in BLOCKS:
        found, expected = block_in(page, block), texts[block.name]
        diff = difflib.unified_diff(
            found.splitlines(), expected.splitlines(), "docs", "records", lineterm=""
        )
        assert found == expected, (
            f"{PAGE}: block {block.name!r} differs from its records; {REGENERATE}:\n"
            + "\n".join(diff)
        )


def test_no_table_is_typed_by_hand() -> None:
    typed = [line for line in outside_blocks(PAGE.read_text()).splitlines() if line.startswith("|")]
    assert not typed, (
        f"{PAGE} has table rows outside the generated blocks: {typed[:3]}; render tables from "
        "a benchmark's record (benchmarks/tables) or write the figures as prose"
    )


def test_every_record_is_shown() -> None:
    shown = {path for block in BLOCKS for path in block.records(RESULTS)}
    assert set(RECORDS) == shown, f"records no block renders: {sorted(set(RECORDS) - shown)}"


@pytest.mark.parametrize("path", RECORDS, ids=lambda path: path.name)
def test_each_record_names_its_commit_date_and_machine(path: Path) -> None:
    """The schema holds the commit (40 hex digits), the date with its zone, the cores and
    the load averages at the start; each figure carries its own load average."""
    kind = json.loads(path.read_text()).get("benchmark")
    assert kind in SCHEMAS, f"{path}: 'benchmark' is {kind!r}, expected one of {sorted(SCHEMAS)}"
    record = read(path, SCHEMAS[kind])
    source = record.provenance  # type: ignore[attr-defined]
    assert source.date.utcoffset() is not None and source.date.utcoffset().total_seconds() == 0
    shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    if not shallow:  # a full clone holds every commit a record names
        known = _git("cat-file", "-e", f"{source.commit}^{{commit}}")
        assert known.returncode == 0, f"{path}: commit {source.commit} is not in this history"


def test_a_changed_figure_fails_the_check(tmp_path: Path) -> None:
    """The check compares figures, not only the files' presence."""
    for path in RECORDS:
        (tmp_path / path.name).write_text(path.read_text())
    quiet = tmp_path / "client_accuracy_quiet.json"
    data = json.loads(quiet.read_text())
    data["levels"][0]["gap_p99"] = 123.456
    quiet.write_text(json.dumps(data))
    block = next(b for b in BLOCKS if b.name == "client-accuracy-quiet")
    assert rendering(tmp_path)[block.name] != block_in(PAGE.read_text(), block)


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
