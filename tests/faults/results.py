"""The matrix's figures: each cell's row merged into one JSON file per run.

`HANDOFF_FAULTS_RESULTS=FILE` names the file (tests/faults/results.json is the one the
table of docs/faults.md is rendered from); without it each run writes a new file under
~/.cache/handoff/faults/ (one for all the workers of a pytest-xdist run).
Rows are keyed by (fault, step): a run of some cells updates those and keeps the rest.
Each row says where it came from (commit, date, load: tests/faults/freshness.py) and
whether the cell passed; a failing cell writes a failing row, with its error's first line.
Workers merge under a lock, so no row is lost when two cells end at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

COMMITTED = Path(__file__).with_name("results.json")
ENV = "HANDOFF_FAULTS_RESULTS"
STARTED_ENV = "HANDOFF_FAULTS_RUN_STARTED"
DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # a row's date (UTC), as freshness.provenance writes it


def pin_run_start() -> str:
    """When this run began, in a row's date format: set once by the controller, before
    pytest-xdist starts the workers that inherit it."""
    if not os.environ.get(STARTED_ENV, "").strip():
        os.environ[STARTED_ENV] = time.strftime(DATE_FORMAT, time.gmtime())
    return os.environ[STARTED_ENV]


def of_this_run(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows this run wrote (each dated at its cell's start): a file that already held
    rows, like the committed one, keeps the older rows of the same cells until this run
    replaces them, and those say nothing of this run."""
    started = pin_run_start()
    return [r for r in rows if str(r.get("date") or "") >= started]


def results_path() -> Path:
    """The file named by the environment, else a new one per run under the cache (pytest's
    temporary folders are removed after a few runs)."""
    chosen = os.environ.get(ENV)
    # xdist's workers share their run's id: one file for the run, not one per worker
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:8]
    stamp = time.strftime("%Y%m%dT%H%M%S") if not run_id else f"run-{run_id}"
    default = Path.home() / ".cache" / "handoff" / "faults" / f"results-{stamp}.json"
    return Path(chosen) if chosen else default


def load(path: Path) -> list[dict[str, Any]]:
    """The rows, read under the lock the workers write under (never a half-written file)."""
    if not path.exists():
        return []
    with path.open() as file:
        fcntl.flock(file, fcntl.LOCK_SH)
        text = file.read()
    return list(json.loads(text)["cells"]) if text.strip() else []


def merge(path: Path, row: dict[str, Any]) -> None:
    """Replace the row of the same cell (or add it), keeping the others; the row notes
    the machine's load while the cell ran (figures from a busy machine read differently)."""
    row = {**row, "load_1min": round(os.getloadavg()[0], 1), "cpus": os.cpu_count()}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as file:  # rewritten in place: the lock stays on the file
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        text = file.read()
        kept = json.loads(text)["cells"] if text.strip() else []
        rows = [r for r in kept if (r["fault"], r["step"]) != (row["fault"], row["step"])]
        file.seek(0)
        file.truncate()
        file.write(json.dumps({"cells": [*rows, row]}, indent=1) + "\n")
