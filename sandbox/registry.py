"""The sandbox image registry: Debian's ``docker-registry`` with a config of our own.

Debian's default config listens on every interface and turns on htpasswd; ours listens on
127.0.0.1 at a free port, keeps blobs under the run directory and allows deletes. The
process is detached (it outlives the CLI that started it); ``registry.json`` and
``registry.pid`` in its directory let another process find and stop it. Its JSON log
records every request with a nanosecond timestamp: ``requests()`` reads it back, the
server-side ground truth for when an image appeared and when it was polled.
"""

from __future__ import annotations

import json
import secrets
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml
from pydantic import BaseModel

from sandbox import procs

BINARY = "/usr/bin/docker-registry"
_STATE = "registry.json"


class RegistryStartError(RuntimeError):
    """docker-registry did not come up."""


class RegistryRequest(BaseModel):
    """One request as the registry logged it on completion."""

    time: datetime
    method: str
    uri: str
    status: int


class Registry(BaseModel):
    """A running docker-registry: where it listens and how to stop it."""

    directory: Path
    port: int
    process: procs.ProcessRecord

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, run_dir: Path, *, auth: dict[str, Any] | None = None) -> Registry:
        """Start a registry storing under ``run_dir/registry``.

        ``auth`` is docker-registry's ``auth:`` section (``token`` or ``htpasswd``); the
        sandbox runs without one. A port taken between choosing and binding is retried.
        """
        directory = run_dir.resolve() / "registry"
        directory.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            port = procs.free_port()
            config = write_config(directory, port=port, auth=auth)
            log = directory / "registry.log"
            record = procs.spawn("registry", [BINARY, "serve", str(config)], log)
            registry = cls(directory=directory, port=port, process=record)
            if registry._wait_ready():
                registry._save()
                return registry
            procs.stop(record)
            if "address already in use" not in procs.log_tail(record.log):
                break
        raise RegistryStartError(
            f"docker-registry in {directory} did not answer on {registry.url}/v2/ within 10 s; "
            f"expected HTTP 200 or 401. Log tail:\n{procs.log_tail(record.log)}"
        )

    @classmethod
    def attach(cls, run_dir: Path) -> Registry:
        """The registry started for ``run_dir``, possibly by another process."""
        return cls.model_validate_json((run_dir.resolve() / "registry" / _STATE).read_text())

    def is_running(self) -> bool:
        return procs.is_alive(self.process)

    def stop(self) -> bool:
        """Stop it (SIGTERM, then SIGKILL); True if it was running. Blobs stay on disk."""
        stopped = procs.stop(self.process)
        (self.directory / "registry.pid").unlink(missing_ok=True)
        return stopped

    def requests(self) -> list[RegistryRequest]:
        """Every completed request so far, oldest first, from the registry's own log."""
        return read_requests(self.process.log)

    def _wait_ready(self, timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.is_running():
            try:
                if httpx.get(f"{self.url}/v2/", timeout=1.0).status_code in (200, 401):
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        return False

    def _save(self) -> None:
        (self.directory / "registry.pid").write_text(f"{self.pid}\n")
        (self.directory / _STATE).write_text(self.model_dump_json(indent=2))


def write_config(directory: Path, *, port: int, auth: dict[str, Any] | None) -> Path:
    """docker-registry's config: loopback only, filesystem storage, deletes on, JSON logs."""
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "info", "formatter": "json", "accesslog": {"disabled": True}},
        "storage": {
            "filesystem": {"rootdirectory": str(directory / "data")},
            "delete": {"enabled": True},
        },
        "http": {"addr": f"127.0.0.1:{port}", "secret": secrets.token_hex(16)},
    }
    if auth:
        config["auth"] = auth
    path = directory / "config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def read_requests(log: Path) -> list[RegistryRequest]:
    """Parse the JSON log's ``response completed`` lines; other lines are skipped."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if "http.response.status" not in entry:
            continue
        found.append(
            RegistryRequest(
                time=entry["time"],
                method=entry["http.request.method"],
                uri=entry["http.request.uri"],
                status=entry["http.response.status"],
            )
        )
    return found
