"""A validating admission webhook on loopback, for a real kube-apiserver to call: TLS with
its own CA, answering AdmissionReview v1 with the verdict the test sets."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sandbox.certs import self_signed


@dataclass
class Verdicts:
    """What the webhook answers: each queued status first, then `then` (None: allow)."""

    queued: list[dict[str, Any]] = field(default_factory=list)
    then: dict[str, Any] | None = None
    asked: int = 0

    def next(self) -> dict[str, Any] | None:
        self.asked += 1
        return self.queued.pop(0) if self.queued else self.then


@dataclass(frozen=True)
class Webhook:
    url: str
    ca_bundle: str  # base64 PEM, for the webhook configuration
    verdicts: Verdicts


def _certificate(directory: Path) -> tuple[Path, Path]:
    key, crt = directory / "webhook.key", directory / "webhook.crt"
    self_signed(key, crt, "/CN=127.0.0.1", days=1, san="IP:127.0.0.1")
    return key, crt


@contextmanager
def admission_webhook(directory: Path) -> Iterator[Webhook]:
    key, crt = _certificate(directory)
    verdicts = Verdicts()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status = verdicts.next()
            response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": status is None}
            if status is not None:
                response["status"] = status
            body = json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": response,
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Webhook(
            url=f"https://127.0.0.1:{server.server_address[1]}/validate",
            ca_bundle=base64.b64encode(crt.read_bytes()).decode(),
            verdicts=verdicts,
        )
    finally:
        server.shutdown()
        server.server_close()
