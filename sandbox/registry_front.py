"""A loopback front for the sandbox registry, switched between three modes to inject
registry faults: `pass` relays every byte to the real registry behind it, `unavailable`
answers each request 503 as an overloaded registry or its load balancer does, and
`hang` accepts connections and never answers, so clients meet their own timeouts.

The registry itself stays running behind the front; a handoff whose image reference
names the front's address meets exactly what the front is switched to. Leaving `pass`
closes the connections relaying at that moment, so a client's kept-alive connection
meets the fault too (as it would when a registry goes away).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from typing import Literal

Mode = Literal["pass", "unavailable", "hang"]
_BODY = json.dumps(
    {"errors": [{"code": "UNAVAILABLE", "message": "service unavailable", "detail": None}]}
).encode()


class RegistryFront:
    """Listens on 127.0.0.1 at a free port; `upstream` is the registry's host:port."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._mode: Mode = "pass"
        self._lock = threading.Lock()
        self._relaying: set[socket.socket] = set()
        self.answered_503 = 0  # requests the front answered 503
        self.held = 0  # connections accepted and never answered
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="registry-front").start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def switch(self, mode: Mode) -> None:
        with self._lock:
            self._mode = mode
            relaying, self._relaying = self._relaying, set()
        if mode != "pass":
            for sock in relaying:
                _close(sock)

    def close(self) -> None:
        self._closed = True
        self.switch("unavailable")  # wakes held connections, drops relays
        _close(self._listener)

    def __enter__(self) -> RegistryFront:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                mode = self._mode
            target = {"pass": self._relay, "unavailable": self._refuse, "hang": self._hold}[mode]
            threading.Thread(target=target, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self._upstream, timeout=5)
        except OSError:
            _close(conn)
            return
        upstream.settimeout(None)
        with self._lock:
            self._relaying |= {conn, upstream}
        threading.Thread(target=_pump, args=(upstream, conn), daemon=True).start()
        _pump(conn, upstream)

    def _refuse(self, conn: socket.socket) -> None:
        """Answer every request on the connection 503 (Retry-After: 1), then close."""
        try:
            head = _read_head(conn)
            if head:
                with self._lock:
                    self.answered_503 += 1
                body = b"" if head.startswith(b"HEAD ") else _BODY
                conn.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    + b"Retry-After: 1\r\nConnection: close\r\n"
                    + f"Content-Length: {len(_BODY)}\r\n\r\n".encode()
                    + body
                )
        except OSError:
            pass
        _close(conn)

    def _hold(self, conn: socket.socket) -> None:
        """Read and ignore; close only once the front leaves `hang` or the client goes."""
        with self._lock:
            self.held += 1
        conn.settimeout(0.5)
        while True:
            with self._lock:
                if self._mode != "hang":
                    break
            try:
                if not conn.recv(65536):
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        _close(conn)


def _read_head(conn: socket.socket) -> bytes:
    conn.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    return data


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    _close(src)
    _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
