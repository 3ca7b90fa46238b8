"""The matrix's figures: each cell's row merged into one JSON file per run.

`HANDOFF_FAULTS_RESULTS=FILE` names the file (tests/faults/results.json is the one the
README's table is rendered from); without it each run writes a new file under
~/.cache/handoff/faults/.
Rows are keyed by (fault, step): a run of some cells updates those and keeps the rest.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

COMMITTED = Path(__file__).with_name("results.json")
ENV = "HANDOFF_FAULTS_RESULTS"


def results_path() -> Path:
    """The file named by the environment, else a new one per run under the cache (pytest's
    temporary folders are removed after a few runs)."""
    chosen = os.environ.get(ENV)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    default = Path.home() / ".cache" / "handoff" / "faults" / f"results-{stamp}.json"
    return Path(chosen) if chosen else default


def load(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["cells"]) if path.exists() else []


def merge(path: Path, row: dict[str, Any]) -> None:
    """Replace the row of the same cell (or add it), keeping the others; the row notes
    the machine's load while the cell ran (figures from a busy machine read differently)."""
    row = {**row, "load_1min": round(os.getloadavg()[0], 1), "cpus": os.cpu_count()}
    rows = [r for r in load(path) if (r["fault"], r["step"]) != (row["fault"], row["step"])]
    payload = {"cells": [*rows, row]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1) + "\n")
