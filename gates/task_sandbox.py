"""Run untrusted checks (a suite's `function`, a model's `code` answer) in an isolated
subprocess, never in the calling process.

Each check gets a fresh temporary directory as its working directory, CPU, memory, file-size
and open-file limits, a wall-clock limit after which its whole process group is killed, and
no network: a new network namespace (`unshare -n`, only loopback and down) when the machine
allows it, and always an interpreter-level guard (gates.task_harness) refusing sockets, new
processes, native code and writes outside its directory. Root drops to `nobody` first.
Whatever goes wrong, the check scores 0 with the reason.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gates.task_suite import Limits

HARNESS = Path(__file__).with_name("task_harness.py")


@dataclass(frozen=True)
class Verdict:
    """One answer's score (1.0 right, 0.0 wrong, or a grade) and why."""

    score: float
    detail: str

    @property
    def passed(self) -> bool:
        return self.score >= 1.0


@functools.cache
def network_isolation() -> str:
    """How the checks are cut off from the network on this machine, in words."""
    if _unshare() is not None:
        return "own network namespace (unshare -n) and sockets refused by the interpreter guard"
    return (
        "sockets refused by the interpreter guard only: no network namespace here "
        "(unshare -n is missing or not permitted)"
    )


@functools.cache
def _unshare() -> list[str] | None:
    tool = shutil.which("unshare")
    if tool is None:
        return None
    done = subprocess.run([tool, "-n", "true"], capture_output=True, check=False)
    return [tool, "-n", "--"] if done.returncode == 0 else None


def run_isolated(job: dict[str, object], limits: Limits) -> Verdict:
    """Run one job (`kind` code: `answer`, `tests`; `kind` function: `source`, `answer`)."""
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="handoff-task-") as tmp:
        home = Path(tmp) / "work"
        home.mkdir()
        job_file = Path(tmp) / "job.json"
        payload = job | {"nonce": nonce, "cpu_s": limits.cpu_s, "memory_mb": limits.memory_mb}
        job_file.write_text(json.dumps(payload))
        job_file.chmod(0o600)
        argv = [*(_unshare() or []), sys.executable, "-I", str(HARNESS), str(job_file)]
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(home)}
        process = subprocess.Popen(
            argv,
            cwd=home,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: killed as a whole
        )
        try:
            out, err = process.communicate(timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            return Verdict(0.0, f"killed after the wall-clock limit of {limits.wall_s:g} s")
        finally:
            _kill_group(process)  # anything it left behind
    return _read(out, err, process.returncode, nonce, limits)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _read(out: bytes, err: bytes, code: int, nonce: str, limits: Limits) -> Verdict:
    for line in reversed(out.decode(errors="replace").splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and found.get("nonce") == nonce:
            return Verdict(float(found["score"]), str(found["detail"]))
    if code == -signal.SIGXCPU or code == -signal.SIGKILL:
        return Verdict(0.0, f"killed at the CPU limit of {limits.cpu_s} s (signal {-code})")
    tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
    return Verdict(0.0, f"ended without a verdict (exit {code}): {tail[0][:300]}")
