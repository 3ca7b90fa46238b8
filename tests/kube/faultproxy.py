"""A faulty front for a real server: an HTTP proxy on 127.0.0.1 that answers requests
matching a rule with an error status a set number of times (or, for a rule of status 0,
passes them on only after a delay: a request in flight that long), and passes every other
request to the real server (the apiserver over TLS, or a registry) with the answer
streamed back unchanged (watches included)."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPSConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


@dataclass
class Fault:
    method: str
    path: str  # a substring of the request path
    status: int  # 0: not an error, the request is passed on after delay_s
    times: int  # how many matching requests the rule takes (-1: all)
    retry_after: str | None = None
    delay_s: float = 0.0
    arrived: threading.Event = field(default_factory=threading.Event)  # one was taken


@dataclass
class Faults:
    rules: list[Fault] = field(default_factory=list)
    seen: list[tuple[str, str, int]] = field(default_factory=list)  # method, path, status
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for rule in self.rules:
                if rule.method == method and rule.path in path and rule.times != 0:
                    rule.times -= 1 if rule.times > 0 else 0
                    rule.arrived.set()
                    return rule
        return None

    def statuses(self, method: str, path: str) -> list[int]:
        return [s for m, p, s in self.seen if m == method and path in p]


@contextmanager
def fault_proxy(upstream: str, *, ca: Path | None = None) -> Iterator[tuple[str, Faults]]:
    """(the proxy's URL, its rules and what it saw) in front of upstream."""
    target = urlsplit(upstream)
    faults = Faults()

    def connect() -> HTTPConnection:
        if target.scheme == "https":
            context = ssl.create_default_context(cafile=str(ca) if ca else None)
            return HTTPSConnection(target.hostname or "", target.port, context=context)
        return HTTPConnection(target.hostname or "", target.port)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection; the close ends a body

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            fault = faults.take(self.command, self.path)
            if fault is not None and fault.status == 0:
                time.sleep(fault.delay_s)
            elif fault is not None:
                faults.seen.append((self.command, self.path, fault.status))
                self._fail(fault)
                return
            conn = connect()
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            headers["Host"] = target.netloc
            conn.request(self.command, self.path, body=body, headers=headers)
            answer = conn.getresponse()
            faults.seen.append((self.command, self.path, answer.status))
            self.send_response(answer.status, answer.reason)
            for key, value in answer.getheaders():
                if key.lower() not in HOP | {"content-length"}:
                    self.send_header(key, value)
            self.end_headers()
            try:
                while chunk := answer.read1(65536):
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                conn.close()

        def _fail(self, fault: Fault) -> None:
            body = json.dumps(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "message": f"injected {fault.status}",
                    "code": fault.status,
                    "errors": [{"code": "UNAVAILABLE", "message": f"injected {fault.status}"}],
                }
            ).encode()
            self.send_response(fault.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if fault.retry_after is not None:
                self.send_header("Retry-After", fault.retry_after)
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", faults
    finally:
        server.shutdown()
        server.server_close()
