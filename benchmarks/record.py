"""Where a benchmark's figures came from, written beside them (`--record PATH`).

Each record names the commit the benchmark ran on, the measured code that differed from it,
the date (UTC), the command and the machine (cores, load averages at the start); the
figures carry the load average taken while they were measured. docs/performance.md's tables
are rendered from these files by `python -m benchmarks.tables --docs`, never typed.

On a copy of the tree (another machine), `BENCHMARK_COMMIT` names the commit the copy was
taken at: it wins over the copy's own git metadata, which may be older than the tree. The
measured code is then compared with that commit where the copy's history holds it, and
`dirty_files` is null (not checked) where it does not.
"""

from __future__ import annotations

import math
import os
import platform
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
COMMIT_ENV = "BENCHMARK_COMMIT"
# The code a benchmark's figures depend on: an uncommitted change here is listed.
MEASURED_CODE = ("benchmarks", "gates", "sandbox", "tests/gates/servers.py")
# the records themselves, and the page's rendering of them
NOT_CODE = (":(exclude)benchmarks/results", ":(exclude)benchmarks/tables")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Provenance(Frozen):
    commit: str = Field(pattern=r"^[0-9a-f]{40}$", description="git rev-parse HEAD")
    dirty_files: list[str] | None = Field(
        description="measured code that differed from the commit; null: not checked"
    )
    date: AwareDatetime = Field(description="when the benchmark started, UTC")
    command: str
    cpus: int = Field(ge=1)
    load_start: tuple[float, float, float] = Field(description="1, 5, 15-minute load averages")
    python: str
    kernel: str


def load_1m() -> float:
    return round(os.getloadavg()[0], 2)


def finite(value: float, digits: int = 4) -> float | None:
    """JSON has no NaN: a figure with nothing to measure is null."""
    return round(value, digits) if math.isfinite(value) else None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return done.stdout


def _changed_since(commit: str) -> list[str] | None:
    """The measured code that differs from `commit` (untracked files too), or None when
    this checkout's history lacks the commit."""
    if _git("cat-file", "-e", f"{commit}^{{commit}}") is None:
        return None
    changed = _git("diff", "--name-only", commit, "--", *MEASURED_CODE, *NOT_CODE) or ""
    new = _git("ls-files", "--others", "--exclude-standard", "--", *MEASURED_CODE, *NOT_CODE)
    return sorted({*changed.split(), *(new or "").split()})


def provenance() -> Provenance:
    """The commit, the date and the machine, as the benchmark starts."""
    head = os.environ.get(COMMIT_ENV) or (_git("rev-parse", "HEAD") or "").strip()
    if not head:
        raise RuntimeError(
            f"the benchmark's record needs the commit it runs on: {ROOT} is no git checkout "
            f"and {COMMIT_ENV} is unset; set {COMMIT_ENV} to the commit this tree was copied at"
        )
    one, five, fifteen = (round(v, 2) for v in os.getloadavg())
    return Provenance(
        commit=head,
        dirty_files=_changed_since(head),
        date=datetime.now(UTC).replace(microsecond=0),
        command=shlex.join(["python", *sys.argv]),
        cpus=os.cpu_count() or 1,
        load_start=(one, five, fifteen),
        python=platform.python_version(),
        kernel=platform.release(),
    )


def write(path: Path, record: BaseModel) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record.model_dump_json(indent=1) + "\n")
    print(f"recorded {path}")
