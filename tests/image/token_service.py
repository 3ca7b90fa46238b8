"""A Docker registry token service for tests: docker-registry's ``auth: token`` realm.

The registry itself stays real and issues the ``WWW-Authenticate: Bearer`` challenge; this
service checks Basic credentials at ``/token`` and answers with a JWT (RS256, the signing
certificate in ``x5c``) granting the requested scope, which the registry verifies against
``rootcertbundle``. Keys and signatures come from the ``openssl`` command line.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

SERVICE = "handoff-test-registry"
ISSUER = "handoff-test-token-issuer"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenService:
    """Issues tokens to one user; records the (service, scope) of every request."""

    def __init__(self, directory: Path, *, username: str, password: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.key, self.cert = directory / "token.key", directory / "token.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=handoff-test-token", "-keyout", str(self.key), "-out", str(self.cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        der = subprocess.run(
            ["openssl", "x509", "-in", str(self.cert), "-outform", "DER"],
            check=True, capture_output=True,
        ).stdout  # fmt: skip
        self._x5c = base64.b64encode(der).decode()
        self._basic = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        self.requests: list[dict[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/token"

    def registry_auth(self) -> dict[str, object]:
        """docker-registry's ``auth:`` section pointing at this service."""
        return {"token": {"realm": self.realm, "service": SERVICE, "issuer": ISSUER,
                          "rootcertbundle": str(self.cert)}}  # fmt: skip

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def issue(self, scope: str, subject: str) -> str:
        access = []
        for item in scope.split():
            kind, name, actions = item.split(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": subject, "aud": SERVICE, "exp": now + 300,
                  "nbf": now - 10, "iat": now, "jti": uuid.uuid4().hex,
                  "access": access}  # fmt: skip
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self._x5c]}
        signing_input = (
            f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        )
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.key)],
            input=signing_input.encode(), check=True, capture_output=True,
        ).stdout  # fmt: skip
        return f"{signing_input}.{_b64url(signature)}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
                service.requests.append(query)
                if self.headers.get("Authorization") != service._basic:
                    self._answer(401, {"details": "bad or missing credentials"})
                    return
                token = service.issue(query.get("scope", ""), subject="ci")
                self._answer(200, {"token": token, "expires_in": 300})

            def _answer(self, status: int, body: dict[str, object]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

        return Handler
