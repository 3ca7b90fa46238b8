"""A local Prefect server for the sandbox, so the UI shows handoff runs and a paused
run can be approved from the browser or from another process.

Its database, settings and concurrency leases live in the run directory (PREFECT_HOME),
analytics off.
It answers only requests carrying the sandbox's `user:password` (PREFECT_SERVER_API_AUTH_STRING),
made once per sandbox and kept in the run directory, readable by its owner only: anyone
on the machine who reaches an open Prefect could start handoffs.
"""

from __future__ import annotations

import base64
import importlib.metadata
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

from sandbox import paths, procs

# Prefect keeps concurrency leases in memory by default: a restart would forget them while
# their slots stay counted, and nothing would free a Service's handoff slot (flows/slots.py).
LEASE_STORAGE = "prefect.server.concurrency.lease_storage.filesystem"

DATABASE = "prefect.db"  # in PREFECT_HOME, Prefect's default SQLite database

# A deadline, not a wait: a first start (migrations) on a busy 2-core machine takes minutes.
READY_S = 300.0


class PrefectServerError(RuntimeError):
    """The Prefect server did not come up; the message carries its log tail."""


def auth_file(run_dir: Path) -> Path:
    return run_dir / "prefect-auth"


def protect(run_dir: Path, pair: str | None = None) -> None:
    """Make this sandbox's Prefect credentials (`pair`, else a random
    `handoff:<password>`; mode 0600); every later spawn in run_dir starts the server
    requiring them."""
    pair = pair or f"handoff:{secrets.token_urlsafe(24)}"
    fd = os.open(auth_file(run_dir), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{pair}\n")


def auth_string(run_dir: Path) -> str | None:
    """The sandbox's `user:password`, or None when its Prefect is open."""
    path = auth_file(run_dir)
    return path.read_text().strip() if path.is_file() else None


def basic_auth(auth_string: str | None) -> dict[str, str]:
    """The Authorization header Prefect's clients send for a `user:password` (none: {})."""
    if not auth_string:
        return {}
    return {"Authorization": "Basic " + base64.b64encode(auth_string.encode()).decode()}


def own_headers() -> dict[str, str]:
    """The Authorization header for this process's Prefect credentials
    ($PREFECT_API_AUTH_STRING, as Prefect's own client sends it), for plain HTTP calls."""
    return basic_auth(os.environ.get("PREFECT_API_AUTH_STRING"))


def client_env(run_dir: Path, api_url: str) -> dict[str, str]:
    """What a Prefect client needs to use the sandbox's server."""
    secret = auth_string(run_dir)
    return {"PREFECT_API_URL": api_url, **({"PREFECT_API_AUTH_STRING": secret} if secret else {})}


def server_env(
    run_dir: Path, port: int, *, auth_string: str | None = None, lease_storage: str = LEASE_STORAGE
) -> dict[str, str]:
    """auth_string (`user:password`): the server then answers only requests carrying it
    (clients set PREFECT_API_AUTH_STRING to the same). lease_storage: Prefect's module for
    concurrency leases (the sandbox's keeps them on disk)."""
    home = run_dir / "prefect"
    home.mkdir(parents=True, exist_ok=True)
    auth = {"PREFECT_SERVER_API_AUTH_STRING": auth_string} if auth_string else {}
    return {
        **os.environ,
        **auth,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": lease_storage,
        "DO_NOT_TRACK": "1",
        "PREFECT_API_URL": "",
        "PREFECT_UI_ENABLED": "true",
        # The UI is a browser app: it must be told where its API is, or it calls :4200.
        "PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api",
        # Events (merge triggers, the newest-merge check) readable within half a second.
        "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL": "0.5",
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }


def schema_template() -> Path:
    """A Prefect database migrated to this Prefect's head, made once per Prefect version in
    the build cache. A fresh server starts from a copy of it instead of running its
    migrations itself: on 2 cores they were 11 s of the 18 s of CPU a first start takes,
    and the suite starts a server or more per worker. Made by `prefect server database
    upgrade` alone, so it holds the schema and nothing a server wrote."""
    version = importlib.metadata.version("prefect")
    path = paths.cache_dir() / f"prefect-{version}-schema.db"

    def migrate() -> None:
        with tempfile.TemporaryDirectory(dir=path.parent) as home:
            done = subprocess.run(
                [sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"],
                env={**os.environ, "PREFECT_HOME": home},
                capture_output=True,
                text=True,
                timeout=READY_S,
            )
            made = Path(home) / DATABASE
            if done.returncode != 0 or not made.is_file():
                raise PrefectServerError(
                    f"migrating a Prefect {version} database in {home} failed (exit "
                    f"{done.returncode}): {(done.stdout + done.stderr)[-2000:]}"
                )
            # One file, whole: the write-ahead log folded in and off (Prefect turns it on
            # again at its first connection).
            with closing(sqlite3.connect(made)) as db:
                db.execute("PRAGMA journal_mode=DELETE")
            os.replace(made, path)

    return paths.made_once(path, migrate)


def spawn(
    run_dir: Path, port: int | None = None, *, lease_storage: str = LEASE_STORAGE
) -> tuple[procs.ProcessRecord, str]:
    """Start `prefect server start` on `port` (a restart keeps its port, its database and
    its credentials in run_dir), else a free loopback port; return (process, API URL)."""
    port = port or procs.free_port()
    home = run_dir / "prefect"
    if not (home / DATABASE).exists():  # a first start: the schema made once, copied
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(schema_template(), home / DATABASE)
    argv = [
        sys.executable,
        "-m",
        "prefect",
        "server",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    record = procs.spawn(
        "prefect-server",
        argv,
        run_dir / "logs" / "prefect-server.log",
        env=server_env(
            run_dir, port, auth_string=auth_string(run_dir), lease_storage=lease_storage
        ),
    )
    return record, f"http://127.0.0.1:{port}/api"


def wait_healthy(record: procs.ProcessRecord, api: str) -> None:
    """Poll /api/health; name the server and show its log if it dies or stays down."""
    procs.wait_answering(record, f"{api}/health", timeout_s=READY_S, error=PrefectServerError)
