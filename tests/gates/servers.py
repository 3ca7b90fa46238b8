"""Start and stop simulated model-server processes (`python -m sandbox.modelserver`)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
START_DEADLINE_S = 60.0
STOP_GRACE_S = 10.0


@dataclass
class ModelServer:
    """One running server; `url` is its base URL on loopback."""

    profile: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    ground_truth: Path | None = None
    args: list[str] = field(default_factory=list)

    def stop(self) -> None:
        """SIGTERM (the server drains its streams), then SIGKILL after a grace period."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(
    profile: str,
    *,
    workdir: Path,
    args: list[str] | tuple[str, ...] = (),
    ground_truth: bool = False,
) -> ModelServer:
    """Start a server on an OS-chosen port and wait until it prints its address."""
    workdir.mkdir(parents=True, exist_ok=True)
    stem = f"{profile}-{time.monotonic_ns()}"
    log_path = workdir / f"{stem}.log"
    truth = workdir / f"{stem}.truth.jsonl" if ground_truth else None
    command = [
        sys.executable,
        "-m",
        "sandbox.modelserver",
        "--profile",
        profile,
        "--port",
        "0",
        *args,
        *(["--ground-truth", str(truth)] if truth else []),
    ]
    with log_path.open("wb") as log:  # a file, not a pipe: a full pipe would block the server
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = _wait_for_address(process, log_path, command)
    return ModelServer(profile, url, process, log_path, truth, list(args))


def start_truth_server(
    *, workdir: Path, interval_ms: float = 25.0, cpus: set[int] | None = None
) -> ModelServer:
    """Start `sandbox.truthserver` (fixed cadence, send times at `/truth`), on `cpus` if set."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"truth-{time.monotonic_ns()}.log"
    command = [sys.executable, "-m", "sandbox.truthserver", "--interval-ms", str(interval_ms)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    if cpus:
        os.sched_setaffinity(process.pid, cpus)
    url = _wait_for_address(process, log_path, command)
    return ModelServer("truth", url, process, log_path)


def _wait_for_address(process: subprocess.Popen[bytes], log_path: Path, command: list[str]) -> str:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        match = LISTENING.search(log_path.read_text(errors="replace"))
        if match:
            return match.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    if process.poll() is None:
        process.kill()
        process.wait()
    raise RuntimeError(
        f"model server {' '.join(command)} did not print 'listening on http://127.0.0.1:PORT' "
        f"within {START_DEADLINE_S:g} s (exit code {process.returncode}); its output:\n"
        f"{log_path.read_text(errors='replace')[-2000:]}"
    )
