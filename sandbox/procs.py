"""Background processes the sandbox starts, and stopping exactly those.

A process is identified by its pid *and* its start time (field 22 of /proc/PID/stat),
so a pid recycled by the kernel after a crash is never signalled by mistake.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
from pydantic import BaseModel


class ProcessRecord(BaseModel):
    """What `down` needs to find and stop a process started by `up`."""

    name: str
    pid: int
    start_ticks: int
    log: Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name in field 2 may hold spaces; fields after the last ')' are fixed.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def is_alive(record: ProcessRecord) -> bool:
    return start_ticks(record.pid) == record.start_ticks


def spawn(
    name: str, argv: Sequence[str], log: Path, *, env: dict[str, str] | None = None
) -> ProcessRecord:
    """Start argv detached from our session, output appended to log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    ticks = start_ticks(proc.pid)
    return ProcessRecord(name=name, pid=proc.pid, start_ticks=ticks or 0, log=log)


def stop(record: ProcessRecord, *, grace_s: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after grace_s; True if our process was running."""
    if not is_alive(record):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(record.pid)
        if not is_alive(record):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGKILL)
    while is_alive(record):
        _reap(record.pid)
        time.sleep(0.02)
    return True


def _reap(pid: int) -> None:
    # Only our own children can be reaped; for others this is a no-op.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def wait_started(
    record: ProcessRecord,
    ready: Callable[[], bool],
    *,
    expected: str,
    timeout_s: float,
    error: type[Exception],
) -> None:
    """Poll `ready` until it holds; raise `error` naming the process, what was `expected`
    and the tail of its log when the process exits first or `timeout_s` passes."""
    who = f"{record.name} (pid {record.pid})"
    deadline = time.monotonic() + timeout_s
    while True:
        if not is_alive(record):
            raise error(
                f"{who} exited during start-up; last lines of {record.log}:\n{log_tail(record.log)}"
            )
        if ready():
            return
        if time.monotonic() >= deadline:
            raise error(
                f"{who} not ready after {timeout_s:.0f} s: expected {expected}; last lines of "
                f"{record.log}:\n{log_tail(record.log)}"
            )
        time.sleep(0.1)


def wait_answering(
    record: ProcessRecord, url: str, *, timeout_s: float, error: type[Exception]
) -> None:
    """`wait_started` until GET `url` answers 200."""
    # One client for all the polls: each new one loads the CA bundle (~20 ms of CPU).
    with httpx.Client(timeout=2.0) as client:
        wait_started(
            record,
            lambda: _answers_200(client, url),
            expected=f"GET {url} to answer 200",
            timeout_s=timeout_s,
            error=error,
        )


def _answers_200(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def log_tail(log: Path, lines: int = 20) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
