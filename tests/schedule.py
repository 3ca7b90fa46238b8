"""The order test files run in: longest first, from the seconds each took last time.

`sandbox/run.sh test` runs two pytest-xdist workers with whole files to one worker
(`--dist loadfile`). Left to itself, xdist queues the files with the most tests first
(`--loadscope-reorder`, its default): the unit-test files of hundreds of cases lead and
the handoff files of three tests and several minutes come last, so one worker is still
in a long handoff when the other has run out of work. The test command turns that off
(`--no-loadscope-reorder`) and this module orders the files by their recorded seconds,
longest first (the "longest processing time" rule: the last files to start are the
shortest, so both workers end close together). A file not recorded yet goes first: it
may be long, and a short one costs little there.

The seconds come from tests/file_durations.json, which a run writes when
HANDOFF_RECORD_DURATIONS names a file (`HANDOFF_RECORD_DURATIONS=tests/file_durations.json
sandbox/run.sh test`): each file's setup, call and teardown seconds summed over its tests,
with the commit, the date and the machine's load average beside them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "file_durations.json"
RECORD_ENV = "HANDOFF_RECORD_DURATIONS"


def recorded(path: Path = RECORDED) -> dict[str, float]:
    """Seconds per test file (relative to the repository root), as last recorded."""
    if not path.is_file():
        return {}
    return {str(k): float(v) for k, v in json.loads(path.read_text())["files"].items()}


def longest_first(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Reorder items in place: whole files, longest recorded first, files not recorded
    before all of them; the tests of a file keep their order."""
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(_file_of(item.nodeid), len(first_seen))

    def rank(item: pytest.Item) -> tuple[float, int]:
        name = _file_of(item.nodeid)
        return (-seconds.get(name, float("inf")), first_seen[name])

    items.sort(key=rank)  # stable: a file's tests stay in their order


class Recorder:
    """Sums each file's seconds from the reports the controller receives (with xdist
    every worker's reports reach it) and writes them at the end of the run."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.files: dict[str, float] = defaultdict(float)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.files[_file_of(report.nodeid)] += report.duration

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.files:
            return
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        record = {
            "commit": commit,
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "load_average_1_5_15": list(os.getloadavg()),
            "cpus": os.cpu_count(),
            "files": {k: round(v, 1) for k, v in sorted(self.files.items(), key=lambda f: -f[1])},
        }
        self.out.write_text(json.dumps(record, indent=1) + "\n")


def configure(config: pytest.Config) -> None:
    """Record this run's seconds if asked, in the process that sees every report (the
    controller under xdist, the only process without it)."""
    out = os.environ.get(RECORD_ENV)
    if out and not os.environ.get("PYTEST_XDIST_WORKER"):
        config.pluginmanager.register(Recorder(Path(out)), "handoff-durations")


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]
