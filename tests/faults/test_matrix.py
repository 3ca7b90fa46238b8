"""The fault matrix: every cell of tests/faults/cells.py against the sandbox.

By default a rotating subset runs: two consecutive cells chosen from the commit
(tests/faults/rotation.py), so every cell runs once in 31 commits; the others are `slow`.
The whole matrix is one command (docs/faults.md):

    HANDOFF_FAULTS_RESULTS=tests/faults/results.json \\
        uv run --frozen pytest -m faults -n 2 --dist load tests/faults

Each cell's row, passing or failing, is merged into the run's results file
(tests/faults/results.py) with where it came from (tests/faults/freshness.py); the table
of docs/faults.md is rendered from the committed one. The last test checks the rows of the
cells this run took are of the current code (and, when the run took every cell, the
committed rows).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.kube.client import Kube
from sandbox.seed import World
from sandbox.state import SandboxState
from tests.faults import freshness, results, rotation
from tests.faults.cells import CELLS
from tests.faults.harness import Cell, Seen, Stage, run_cell

pytestmark = [pytest.mark.faults, pytest.mark.timeout(900)]

SUBSET = rotation.subset()
_RAN_HERE: set[tuple[str, str]] = set()  # the cells this process reached (xdist: a worker)


@pytest.fixture(scope="session")
def results_file() -> Iterator[Path]:
    path = results.results_path()
    yield path
    print(f"\nfault matrix results: {path}")


def _param(index: int, cell: Cell) -> object:
    marks = [] if index in SUBSET else [pytest.mark.slow]
    return pytest.param(cell, id=freshness.cell_id(cell.fault, cell.step), marks=marks)


@pytest.fixture
def reached(request: pytest.FixtureRequest) -> None:
    """Set up before the sandbox: a cell whose fixtures fail is still known to be over."""
    cell: Cell = request.node.callspec.params["cell"]
    _RAN_HERE.add((cell.fault, cell.step))


@pytest.mark.parametrize("cell", [_param(i, c) for i, c in enumerate(CELLS)])
def test_cell(
    reached: None,
    cell: Cell,
    sandbox: SandboxState,
    kube: Kube,
    seeded: str,
    request: pytest.FixtureRequest,
    world: World,
    handoff_env: dict[str, str],
    tmp_path: Path,
    results_file: Path,
) -> None:
    if cell.target.spare_gpus and not cell.target.in_place:  # in place needs them taken
        request.getfixturevalue("spare_gpus")
    stage = Stage(sandbox, kube, seeded, handoff_env, world, tmp_path)
    seen = Seen()
    head = {"fault": cell.fault, "step": cell.step}
    provenance = freshness.provenance(freshness.covered_files(cell.fault, cell.step))
    try:
        result = run_cell(stage, cell, seen)
    except (KeyboardInterrupt, pytest.skip.Exception):
        raise
    except BaseException as exc:  # a failing cell writes a failing row
        results.merge(
            results_file,
            {**head, "result": "fail", **seen.figures(), **provenance, "failure": _first(exc)},
        )
        raise
    results.merge(results_file, {**head, "result": "pass", **result.row(), **provenance})


def _first(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:240]


# Long enough for the cells another worker still runs (each at most 900 s).
ROWS_WAIT_S = 2700.0


@pytest.mark.timeout(ROWS_WAIT_S + 300)
def test_rows_are_of_the_current_code(request: pytest.FixtureRequest, results_file: Path) -> None:
    """The rows of the cells this run took name the commit they ran on and none is older
    than the code it covers; when the run took every cell (`-m faults`), so are all the
    committed rows the table of docs/faults.md is rendered from."""
    taken = {
        (cell.fault, cell.step)
        for item in request.session.items
        if (cell := getattr(getattr(item, "callspec", None), "params", {}).get("cell"))
    }
    if not taken:
        pytest.skip("no cell of the matrix in this run")
    rows, missing = _await_rows(results_file, taken)
    problems = [f"{k[0]} @ {k[1]}: no row was written" for k in sorted(missing)]
    stale = _stale(rows)
    everything = taken == {(c.fault, c.step) for c in CELLS}
    if everything and results_file.resolve() != results.COMMITTED.resolve():
        committed = {(r["fault"], r["step"]): r for r in results.load(results.COMMITTED)}
        unrecorded = [(c.fault, c.step) for c in CELLS if (c.fault, c.step) not in committed]
        problems += [f"{f} @ {s}: no row in {results.COMMITTED.name}" for f, s in unrecorded]
        stale += [(k, f"{results.COMMITTED.name}: {why}") for k, why in _stale(committed)]
        missing |= set(unrecorded)
    problems += [f"{k[0]} @ {k[1]}: {why}" for k, why in stale]
    assert not problems, (
        "fault-matrix rows older than the code they cover, or missing:\n  "
        + "\n  ".join(problems)
        + "\nrerun them with:\n  "
        + freshness.rerun_command(
            freshness.cell_id(*k) for k in sorted(missing | {k for k, _ in stale})
        )
    )


def _await_rows(
    path: Path, taken: set[tuple[str, str]]
) -> tuple[dict[tuple[str, str], dict[str, Any]], set[tuple[str, str]]]:
    """The run's rows of the cells taken: at once for those this process ran, waiting
    for those another worker may still be running."""
    deadline = time.monotonic() + ROWS_WAIT_S
    while True:
        rows = {(r["fault"], r["step"]): r for r in results.of_this_run(results.load(path))}
        rows = {k: r for k, r in rows.items() if k in taken}
        missing = taken - rows.keys()
        if not (missing - _RAN_HERE) or time.monotonic() > deadline:
            return rows, missing
        time.sleep(5)


def _stale(rows: dict[tuple[str, str], dict[str, Any]]) -> list[tuple[tuple[str, str], str]]:
    found = []
    for key, row in sorted(rows.items()):
        why = freshness.stale_reason(row) or (None if row.get("date") else "names no date")
        if why:
            found.append((key, why))
    return found
