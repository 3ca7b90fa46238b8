"""Rows say where they came from and are found stale once the code they cover changes;
the rotating subset takes every cell once per cycle of commits. No sandbox: git only."""

from __future__ import annotations

import subprocess

import pytest

from tests.faults import freshness, results, rotation
from tests.faults.cells import CELLS
from tests.faults.freshness import ROOT, covered_files, last_change, stale_reason


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_every_cell_covers_files_that_exist() -> None:
    for cell in CELLS:
        files = covered_files(cell.fault, cell.step)
        assert freshness.CORE[0] in files
        missing = [f for f in files if not (ROOT / f).exists()]
        assert not missing, (cell.key, missing)


def test_a_row_is_stale_once_its_code_changed_after_its_commit() -> None:
    fault, step = "flow SIGKILL", "swap"
    last = last_change(covered_files(fault, step))
    row = {"fault": fault, "step": step}
    assert stale_reason({**row, "commit": _git("rev-parse", "HEAD")}) is None
    assert stale_reason({**row, "commit": last + "+dirty"}) is None
    why = stale_reason({**row, "commit": _git("rev-parse", f"{last}^")})
    assert why is not None and last[:10] in why and "changed" in why
    assert stale_reason(row) == "names no commit"
    assert "does not have" in (stale_reason({**row, "commit": "f" * 40}) or "")


def test_a_row_whose_code_is_the_current_code_is_fresh_whatever_came_between() -> None:
    """Freshness is the code, not the history: a row on a commit off HEAD's history (or
    before a change that was undone) whose covered files are HEAD's is fresh. The commit
    here is made for the test, on no branch."""
    identity = ("-c", "user.name=freshness", "-c", "user.email=freshness@invalid")
    same = _git(*identity, "commit-tree", "HEAD^{tree}", "-m", "HEAD's code, on no branch")
    assert stale_reason({"fault": "flow SIGKILL", "step": "swap", "commit": same}) is None


def test_only_the_rows_this_run_wrote_are_its_own() -> None:
    """The documented rerun writes into the committed file, which holds a row of each cell
    already: until a cell's new row replaces it, the old one says nothing of this run (the
    check of the rows once ran before two cells had written theirs, and read the old ones)."""
    started = results.pin_run_start()
    rows = [
        {"fault": "f", "step": "s", "date": "2000-01-01T00:00:00Z"},
        {"fault": "g", "step": "s", "date": started},
    ]
    assert results.of_this_run(rows) == rows[1:]


def test_a_row_records_its_commit_date_and_the_dirty_covered_files() -> None:
    row = freshness.provenance(covered_files("flow SIGKILL", "swap"))
    assert row["commit"].removesuffix("+dirty") == _git("rev-parse", "HEAD")
    assert row["commit"].endswith("+dirty") == bool(_git("status", "--porcelain"))
    assert row["date"].endswith("Z") and len(row["date"]) == 20
    assert set(row.get("dirty_files", [])) <= {
        line[3:] for line in _git("status", "--porcelain").splitlines()
    } | {""}


def test_the_rerun_command_names_the_cells_and_the_check() -> None:
    command = freshness.rerun_command(["flow-SIGKILL-at-swap"])
    assert "-k 'test_cell[flow-SIGKILL-at-swap] or rows_are_of_the_current_code'" in command
    assert command.startswith("HANDOFF_FAULTS_RESULTS=tests/faults/results.json ")


@pytest.mark.parametrize("count", [len(CELLS), 7, 1])
def test_the_windows_take_every_cell_once_per_cycle(count: int) -> None:
    cycle = rotation.windows(count)
    taken = [i for w in range(cycle) for i in sorted(rotation.chosen(w, count))]
    assert taken == list(range(count))
    assert all(1 <= len(rotation.chosen(w, count)) <= rotation.SIZE for w in range(cycle))
    assert rotation.chosen(cycle + 3, count) == rotation.chosen(3 % cycle, count)


def test_the_subset_is_pinned_for_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(rotation.ENV, raising=False)
    assert rotation.pin() == int(_git("rev-list", "--count", "HEAD"))
    monkeypatch.setenv(rotation.ENV, "5")
    assert rotation.subset() == rotation.chosen(5, len(CELLS))
