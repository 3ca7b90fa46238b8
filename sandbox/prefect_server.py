"""A local Prefect server for the sandbox, so the UI shows handoff runs and a paused
run can be approved from the browser or from another process.

Its database and settings live in the run directory (PREFECT_HOME), analytics off.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sandbox import procs

# A deadline, not a wait: a first start (migrations) on a busy 2-core machine takes minutes.
READY_S = 300.0


class PrefectServerError(RuntimeError):
    """The Prefect server did not come up; the message carries its log tail."""


def server_env(run_dir: Path, port: int, *, auth_string: str | None = None) -> dict[str, str]:
    """auth_string (`user:password`): the server then answers only requests carrying it
    (clients set PREFECT_API_AUTH_STRING to the same)."""
    home = run_dir / "prefect"
    home.mkdir(parents=True, exist_ok=True)
    auth = {"PREFECT_SERVER_API_AUTH_STRING": auth_string} if auth_string else {}
    return {
        **auth,
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_API_URL": "",
        "PREFECT_UI_ENABLED": "true",
        # The UI is a browser app: it must be told where its API is, or it calls :4200.
        "PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api",
        # Events (merge triggers, the newest-merge check) readable within half a second.
        "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL": "0.5",
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }


def spawn(run_dir: Path, port: int | None = None) -> tuple[procs.ProcessRecord, str]:
    """Start `prefect server start` on `port` (a restart keeps its port and its database
    in run_dir), else a free loopback port; return (process, API URL)."""
    port = port or procs.free_port()
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
        env=server_env(run_dir, port),
    )
    return record, f"http://127.0.0.1:{port}/api"


def wait_healthy(record: procs.ProcessRecord, api: str) -> None:
    """Poll /api/health; name the server and show its log if it dies or stays down."""
    procs.wait_answering(record, f"{api}/health", timeout_s=READY_S, error=PrefectServerError)
