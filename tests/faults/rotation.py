"""The fault matrix's rotating subset: the cells the default test run (`.ci/run`) takes.

The matrix's cells, in tests/faults/cells.py's order, are cut into windows of SIZE
consecutive cells; a commit runs window number (its count of commits, `git rev-list
--count HEAD`) modulo the number of windows. Successive commits take successive windows,
so every cell runs once every `windows()` commits (31 with 61 cells), a day or a few
of this project's commits. SIZE is 2: a cell takes 1-3 minutes on the shared 2-core
machines (up to 6 on a loaded one), so the subset adds about 5 minutes to one of the two
test workers (the two fixed default cells it replaces took 4.6 minutes together).

The window is chosen once per test run: `pin()` (tests/conftest.py's pytest_configure)
puts HEAD's count of commits in HANDOFF_FAULTS_WINDOW, which pytest-xdist's workers
inherit, so a commit made while the suite runs cannot give two workers different
selections. Set HANDOFF_FAULTS_WINDOW=N yourself to run window N (modulo the number of
windows; `uv run --frozen python -m tests.faults.rotation` lists them, HEAD's starred).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SIZE = 2
ENV = "HANDOFF_FAULTS_WINDOW"
ROOT = Path(__file__).resolve().parents[2]


def _cell_count() -> int:
    from tests.faults.cells import CELLS

    return len(CELLS)


def windows(count: int | None = None) -> int:
    total = _cell_count() if count is None else count
    return -(-total // SIZE)


def commit_count() -> int:
    """HEAD's count of commits (0 outside a git checkout)."""
    done = subprocess.run(
        ["git", "rev-list", "--count", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else 0


def pin() -> int:
    """The run's window number before the modulo: the one the environment names, else
    HEAD's count of commits, written there (cheap: the cells are not imported)."""
    if not os.environ.get(ENV, "").strip():
        os.environ[ENV] = str(commit_count())
    return int(os.environ[ENV])


def chosen(window: int, count: int) -> set[int]:
    """The indexes (in CELLS) of the window's cells."""
    start = (window % windows(count)) * SIZE
    return set(range(start, min(start + SIZE, count)))


def subset() -> set[int]:
    return chosen(pin(), _cell_count())


def main() -> None:
    from tests.faults.cells import CELLS
    from tests.faults.freshness import cell_id

    now = pin() % windows()
    for window in range(windows()):
        ids = [cell_id(CELLS[i].fault, CELLS[i].step) for i in sorted(chosen(window, len(CELLS)))]
        print(("* " if window == now else "  ") + f"{window:2d}  " + "  ".join(ids))


if __name__ == "__main__":
    main()
