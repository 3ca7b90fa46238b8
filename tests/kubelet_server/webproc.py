"""A plain HTTP process on 127.0.0.1 (`python -m http.server`) standing in for a
container, serving a directory whose files the tests choose."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sandbox import procs


@contextmanager
def http_process(directory: Path, log: Path) -> Iterator[int]:
    """Serve directory on a free 127.0.0.1 port until the block ends; yields the port."""
    port = procs.free_port()
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    record = procs.spawn("http-server", [*argv, "--directory", str(directory)], log)
    try:
        _wait_listening(port, record)
        yield port
    finally:
        procs.stop(record)


def _wait_listening(port: int, record: procs.ProcessRecord, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert procs.is_alive(record), f"http.server exited:\n{procs.log_tail(record.log)}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"http.server not listening on 127.0.0.1:{port} after {timeout_s} s")
