"""Start a model server as a child process and wait for its `listening on` line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

from sandbox.modelserver.config import ServerConfig

BANNER = "listening on "


@dataclass
class ServerProcess:
    config: ServerConfig
    proc: subprocess.Popen[str]
    base_url: str = ""
    stderr_lines: list[str] = field(default_factory=list)
    collector: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.collector = threading.Thread(
            target=_collect, args=(self.proc, self.stderr_lines), daemon=True
        )
        self.collector.start()

    @property
    def stderr(self) -> str:
        """What the server wrote to stderr so far; once it has exited, all of it. The lines
        arrive on a reader thread, which may not yet have read a server's last words when
        its exit is seen, so wait for the pipe's end (bounded: a leftover child of the
        server could keep the pipe open)."""
        if self.proc.poll() is not None:
            self.collector.join(timeout=5)
        return "".join(self.stderr_lines)

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (graceful drain), then wait; SIGKILL if it outlives `timeout_s`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class ServerStartError(RuntimeError):
    def __init__(self, message: str, *, exit_code: int, stderr: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr = stderr


def start(config: ServerConfig, *, timeout_s: float = 60.0) -> ServerProcess:
    cmd = [sys.executable, "-m", "sandbox.modelserver", *config.argv()]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    server = ServerProcess(config, proc)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        line = proc.stdout.readline() if proc.stdout else ""
    finally:
        timer.cancel()
    if not line.startswith(BANNER):
        code = proc.wait()
        raise ServerStartError(
            f"model server {config.profile!r} did not start (expected {BANNER!r} on stdout "
            f"within {timeout_s} s, got {line!r}, exit code {code}); stderr: "
            f"{server.stderr[-2000:]}",
            exit_code=code,
            stderr=server.stderr,
        )
    server.base_url = line.removeprefix(BANNER).strip()
    return server


def start_all(configs: list[ServerConfig]) -> list[ServerProcess]:
    """Start several servers at once (each start mostly waits on imports)."""
    with ThreadPoolExecutor(max_workers=max(1, len(configs))) as pool:
        return list(pool.map(start, configs))


@contextmanager
def launched(config: ServerConfig) -> Iterator[ServerProcess]:
    server = start(config)
    try:
        yield server
    finally:
        server.terminate()


def _collect(proc: subprocess.Popen[str], sink: list[str]) -> None:
    if proc.stderr is not None:
        for line in proc.stderr:
            sink.append(line)
