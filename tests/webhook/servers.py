"""Real servers for the relay, trigger and UI tests, all on 127.0.0.1.

A Prefect server process (`prefect server start`, SQLite, its UI told its own API
address so a browser can use it) and the relay app served by uvicorn in a thread.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import BaseModel

from flows.webhook.app import RelaySettings
from flows.webhook.server import server_config
from sandbox import prefect_server, procs
from sandbox.prefect_server import basic_auth


class PrefectServer(BaseModel):
    api_url: str
    ui_url: str
    home: Path
    process: procs.ProcessRecord
    auth_string: str | None = None  # the `user:password` it requires, if any

    @property
    def headers(self) -> dict[str, str]:
        """What a client sends with PREFECT_API_AUTH_STRING set to its auth_string."""
        return basic_auth(self.auth_string)


def start_prefect(
    run_dir: Path,
    *,
    protected: bool = False,
    pair: str | None = None,
    lease_storage: str = prefect_server.LEASE_STORAGE,
) -> PrefectServer:
    """The Prefect server as the sandbox starts it; protected: requiring credentials
    (`pair`, else made for run_dir, as `handoff sandbox up` does); lease_storage: as
    prefect_server.spawn."""
    if protected:
        prefect_server.protect(run_dir, pair)
    record, api = prefect_server.spawn(run_dir, lease_storage=lease_storage)
    try:
        prefect_server.wait_healthy(record, api)
    except BaseException:
        procs.stop(record)
        raise
    return PrefectServer(
        api_url=api,
        ui_url=api.removesuffix("/api"),
        home=run_dir / "prefect",
        process=record,
        auth_string=prefect_server.auth_string(run_dir),
    )


_shared: PrefectServer | None = None


def shared_prefect(request: pytest.FixtureRequest, base: Path) -> PrefectServer:
    """One Prefect server for the whole test session, whichever directory asks first;
    stopped when the session ends; it requires the suite's credentials
    ($PREFECT_API_AUTH_STRING, tests/conftest.py). With $HANDOFF_TEST_PREFECT_API_URL,
    that server."""
    global _shared
    attach = os.environ.get("HANDOFF_TEST_PREFECT_API_URL")
    if attach:  # a server the tests did not start (kept warm between runs)
        return PrefectServer(
            api_url=attach,
            ui_url=attach.removesuffix("/api"),
            home=base,
            process=procs.ProcessRecord(name="attached", pid=0, start_ticks=0, log=base / "-"),
            auth_string=os.environ.get("PREFECT_API_AUTH_STRING"),
        )
    if _shared is None or not procs.is_alive(_shared.process):
        _shared = start_prefect(
            base, protected=True, pair=os.environ.get("PREFECT_API_AUTH_STRING")
        )
        record = _shared.process
        request.config.add_cleanup(lambda: procs.stop(record))
    return _shared


@contextmanager
def running_relay(settings: RelaySettings) -> Iterator[str]:
    """Serve the relay on a free loopback port; yield its hook URL."""
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(server_config(settings, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the relay did not start within 20 s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/hooks/git"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def start_relay_process(
    *,
    specs_dir: Path,
    api_url: str,
    secret: str,
    state_dir: Path,
    log: Path,
    options: tuple[str, ...] = (),
    insecure: bool = False,
    env: dict[str, str] | None = None,
) -> tuple[procs.ProcessRecord, str]:
    """`handoff webhook serve [options]` as its own process, answering; (it, its hook URL).
    insecure: with --insecure-prefect (the tests' servers require credentials, so the
    relay checks them at start as in a deployment)."""
    port = procs.free_port()
    argv = [
        *(sys.executable, "-m", "cli", "webhook", "serve", "--secret-env"),
        *("HANDOFF_TEST_WEBHOOK_SECRET", "--port", str(port), "--specs-dir", str(specs_dir)),
        *("--state-dir", str(state_dir), "--prefect-api-url", api_url),
        *options,
        *(["--insecure-prefect"] if insecure else []),
    ]
    env = {**os.environ, **(env or {}), "HANDOFF_TEST_WEBHOOK_SECRET": secret}
    record = procs.spawn("relay", argv, log, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{base}/healthz", record)
    except BaseException:
        procs.stop(record)
        raise
    return record, f"{base}/hooks/git"


@contextmanager
def relay_process(**kwargs: Any) -> Iterator[str]:
    """start_relay_process(**kwargs) for the block; yield its hook URL."""
    record, url = start_relay_process(**kwargs)
    try:
        yield url
    finally:
        procs.stop(record)


def _wait_http(url: str, record: procs.ProcessRecord, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and procs.is_alive(record):
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not answering; log:\n{procs.log_tail(record.log)}")
