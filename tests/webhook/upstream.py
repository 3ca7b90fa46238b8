"""Git upstreams for the relay tests, on 127.0.0.1: `git daemon` serving a bare repository
(real git over git://), and a TCP front that either hangs (accepts and never answers, as
a dead forge does) or forwards each connection to such a daemon."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sandbox import procs


@contextmanager
def git_daemon(base: Path) -> Iterator[int]:
    """`git daemon` exporting every repository under base; yield its port."""
    port = procs.free_port()
    argv = [
        *("git", "daemon", "--export-all", "--reuseaddr", "--listen=127.0.0.1"),
        *(f"--port={port}", f"--base-path={base}", str(base)),
    ]
    daemon = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise RuntimeError(f"git daemon on port {port} did not start") from None
                time.sleep(0.05)
        yield port
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


class Front:
    """A listener on 127.0.0.1: `hang` holds every connection open without a byte;
    `forward_to(port)` pipes later connections to that port. `accepted` counts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.target: int | None = None
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def forward_to(self, port: int | None) -> None:
        self.target = port

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.target is None:
                self._held.append(conn)
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pipe, args=(src, dst), daemon=True).start()

    def close(self) -> None:
        self._closing = True
        self.sock.close()
        for conn in self._held:
            conn.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


@contextmanager
def front() -> Iterator[Front]:
    listener = Front()
    try:
        yield listener
    finally:
        listener.close()
