"""The fault matrix: every cell of tests/faults/cells.py against the sandbox.

By default only the cells in cells.DEFAULT run; the whole matrix is
`uv run --frozen pytest -m faults tests/faults`, two cells at a time with `-n 2 --dist load`
(README: "Faults"). Each cell's row is
merged into the results file (tests/faults/results.py) the README's table is rendered from.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.kube.client import Kube
from sandbox.seed import World
from sandbox.state import SandboxState
from tests.faults import results
from tests.faults.cells import CELLS, DEFAULT
from tests.faults.harness import Cell, Stage, run_cell

pytestmark = [pytest.mark.faults, pytest.mark.timeout(900)]


@pytest.fixture(scope="session")
def results_file() -> Iterator[Path]:
    path = results.results_path()
    yield path
    print(f"\nfault matrix results: {path}")


def _param(cell: Cell) -> object:
    marks = [] if (cell.fault, cell.step) in DEFAULT else [pytest.mark.slow]
    ident = re.sub(r"[^A-Za-z0-9]+", "-", f"{cell.fault} at {cell.step}").strip("-")
    return pytest.param(cell, id=ident, marks=marks)


@pytest.mark.parametrize("cell", [_param(c) for c in CELLS])
def test_cell(
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
    if not cell.target.in_place:  # the spare node's GPUs; in place needs them taken
        request.getfixturevalue("spare_gpus")
    stage = Stage(sandbox, kube, seeded, handoff_env, world, tmp_path)
    result = run_cell(stage, cell)
    results.merge(results_file, result.row())
