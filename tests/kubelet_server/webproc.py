"""Processes on 127.0.0.1 standing in for containers: a plain HTTP server
(`python -m http.server`) over a directory the test fills, and a TCP echo server."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sandbox import procs

# Echoes every byte of each connection back until the client closes its side.
_ECHO = """
import socketserver, sys
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)
socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[1])), Echo).serve_forever()
"""


@contextmanager
def http_process(directory: Path, log: Path) -> Iterator[int]:
    """Serve directory on a free 127.0.0.1 port until the block ends; yields the port."""
    argv = [sys.executable, "-m", "http.server", "{port}", "--bind", "127.0.0.1"]
    with _process([*argv, "--directory", str(directory)], log) as port:
        yield port


@contextmanager
def echo_process(log: Path) -> Iterator[int]:
    """A TCP echo server on a free 127.0.0.1 port; yields the port."""
    with _process([sys.executable, "-c", _ECHO, "{port}"], log) as port:
        yield port


@contextmanager
def _process(argv: list[str], log: Path) -> Iterator[int]:
    port = procs.free_port()
    record = procs.spawn(Path(argv[1]).name, [a.replace("{port}", str(port)) for a in argv], log)
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
