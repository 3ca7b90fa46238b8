"""Where a fault-matrix row came from, and whether it is still a row of the current code.

Each row a cell writes names the commit it ran on (`git rev-parse HEAD`, with "+dirty"
when the working tree had uncommitted changes, and the covered files among them), the
date (UTC) and the machine's load. A row is *stale* when the code it covers changed after
its commit: when the cell's covered files (`covered_files`, a small explicit table below)
differ between the row's commit and HEAD (a change undone since leaves the row fresh: the
code is the code it ran). A row naming no commit is stale too.

The table: every cell covers the code each handoff runs whatever the fault (the flow,
its session and resume, the ledger, the Lease, the fenced writes, the drift checks, the
rollback) and the data plane its failed requests are counted on (the Service proxy and
the traffic client); then the module of the step the fault lands in, and the code that
meets the fault itself (signals, retries, slots, the registry client). It names code that
changes what a cell shows, not all code a handoff imports: a change elsewhere leaves the
rows fresh.
"""

from __future__ import annotations

import functools
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.faults.results import DATE_FORMAT

ROOT = Path(__file__).resolve().parents[2]

# Run by every cell: the handoff's skeleton, its recovery and what measures the clients.
CORE = (
    "flows/handoff.py",
    "flows/tasks.py",
    "flows/session.py",
    "flows/start.py",
    "flows/run.py",
    "flows/ledger.py",
    "flows/ledger_store.py",
    "flows/lease.py",
    "flows/drift.py",
    "flows/kube/write.py",
    "flows/kube/read.py",
    "flows/kube/wait.py",
    "flows/rollback.py",
    "sandbox/proxy",
    "sandbox/traffic.py",
)

# The step the fault lands in.
STEP_FILES: dict[str, tuple[str, ...]] = {
    "plan": ("flows/plan.py", "flows/capacity.py", "flows/serving.py", "flows/slots.py"),
    "apply": ("flows/apply.py", "flows/render.py"),
    "image wait": ("flows/image.py",),
    "warm": ("flows/warm.py",),
    "gates": ("flows/gating.py", "flows/evidence.py"),
    "approval wait": ("flows/approve.py", "flows/pause_clock.py"),
    "swap": ("flows/swap.py", "flows/kube/slices.py"),
    "scale": ("flows/scale.py", "flows/swap.py"),
    "retire": ("flows/scale.py",),
    "rollback": ("flows/gating.py",),  # reached by gates made to fail
    "retire before scale-up": ("flows/scale.py", "flows/warm.py", "flows/capacity.py"),
    "swap: routes wait": ("flows/swap.py", "flows/kube/slices.py"),
    # The run after the end: the plan finds what serves and decides from it.
    "done": ("flows/plan.py", "flows/serving.py"),
    "rolled back": ("flows/plan.py", "flows/serving.py", "flows/apply.py", "flows/gating.py"),
    "in place: old pods stop": (
        "flows/apply.py",
        "flows/downtime.py",
        "flows/outage.py",
        "flows/capacity.py",
    ),
}

# The code that meets the fault, by the fault's name's beginning.
FAULT_FILES: dict[str, tuple[str, ...]] = {
    "flow SIGKILL": (),
    "flow SIGTERM": ("flows/signals.py", "flows/kube/client.py"),
    "worker cancels": ("flows/signals.py", "flows/kube/client.py"),
    "same spec run again": (),
    "GPU node cordoned": ("flows/rollback.py",),
    "kube-apiserver down": ("flows/kube/client.py", "retrypolicy"),
    "etcd SIGSTOP": ("flows/kube/client.py", "retrypolicy"),
    "kube-apiserver SIGSTOP": ("flows/kube/client.py", "retrypolicy"),
    "Prefect server restarted": ("flows/slots.py",),
    "candidate pod killed": ("flows/warm.py", "flows/gating.py"),
    "person ": (),  # the drift checks, in CORE
    "Service deleted": (),
    "registry ": ("flows/image.py", "ociclient", "retrypolicy"),
    "candidate's GPU node NotReady": ("flows/warm.py",),
}


def covered_files(fault: str, step: str) -> tuple[str, ...]:
    """The files whose change makes a row of this cell stale."""
    extra = [files for prefix, files in FAULT_FILES.items() if fault.startswith(prefix)]
    if step not in STEP_FILES or len(extra) != 1:
        raise KeyError(f"no covered files for the cell {fault!r} at {step!r}")
    return tuple(dict.fromkeys((*CORE, *STEP_FILES[step], *extra[0])))


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def provenance(files: Iterable[str]) -> dict[str, Any]:
    """What a row records of the code and the machine it ran on."""
    import os

    head = _git("rev-parse", "HEAD").stdout.strip() or "unknown"
    dirty = bool(_git("status", "--porcelain").stdout.strip())
    changed = _git("status", "--porcelain", "--", *files).stdout.splitlines()
    row: dict[str, Any] = {
        "commit": head + ("+dirty" if dirty else ""),
        "date": time.strftime(DATE_FORMAT, time.gmtime()),
        "load_1min": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
    }
    if changed:  # the covered code differed from the commit named
        row["dirty_files"] = sorted(line[3:] for line in changed)
    return row


@functools.cache
def last_change(files: tuple[str, ...]) -> str:
    """The last commit (of HEAD's history) touching any of the files."""
    return _git("log", "-1", "--format=%H", "--", *files).stdout.strip()


@functools.cache
def changed_since(commit: str, files: tuple[str, ...]) -> list[str] | None:
    """The covered files whose committed content differs between `commit` and HEAD (a
    change undone since counts as none); None: git knows no such commit (a row from
    elsewhere)."""
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return None
    return _git("diff", "--name-only", commit, "HEAD", "--", *files).stdout.split()


def stale_reason(row: dict[str, Any]) -> str | None:
    """Why the row is older than the code it covers; None when it is of the current code."""
    commit = str(row.get("commit") or "").removesuffix("+dirty")
    if not commit or commit == "unknown":
        return "names no commit"
    changed = changed_since(commit, covered_files(row["fault"], row["step"]))
    if changed is None:
        return f"ran on {commit[:10]}, a commit this repository does not have"
    if not changed:
        return None
    last = last_change(tuple(changed))
    return f"ran on {commit[:10]}; {last[:10]} changed {', '.join(changed)} since"


def cell_id(fault: str, step: str) -> str:
    """The cell's pytest id in tests/faults/test_matrix.py."""
    import re

    return re.sub(r"[^A-Za-z0-9]+", "-", f"{fault} at {step}").strip("-")


def rerun_command(ids: Iterable[str]) -> str:
    """The one documented command that reruns these cells into the committed results
    (docs/faults.md's table), checks them, and then renders the table."""
    chosen = " or ".join([*(f"test_cell[{i}]" for i in ids), "rows_are_of_the_current_code"])
    return (
        "HANDOFF_FAULTS_RESULTS=tests/faults/results.json uv run --frozen pytest -m faults "
        f"-n 0 tests/faults/test_matrix.py -k '{chosen}' && "
        "uv run --frozen python -m tests.faults.table --docs"
    )
