"""A paused run's form description that keeps time: while a person looks at the
evidence during an in-place outage, the description Prefect shows in the Resume
form is rewritten every few seconds with the downtime clock, so whoever opens the
form sees how long the Service has been down and when the flow rolls back."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from prefect import get_client, get_run_logger
from prefect.runtime import flow_run

REFRESH_S = 2.0


def description_key(pause_key: str) -> str:
    """Where Prefect keeps a paused run's form description (prefect.input's keyset)."""
    return f"paused-{pause_key}-description"


@contextmanager
def ticking(pause_key: str, render: Callable[[], str]) -> Iterator[None]:
    """Rewrite the pause's description with `render()` every REFRESH_S until the block ends."""
    run_id, stop = flow_run.id, threading.Event()
    if run_id is None:
        yield
        return
    log = get_run_logger()
    thread = threading.Thread(
        target=_tick,
        args=(UUID(str(run_id)), description_key(pause_key), render, stop, log),
        daemon=True,
        name="pause-clock",
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def _tick(
    run_id: UUID,
    key: str,
    render: Callable[[], str],
    stop: threading.Event,
    log: logging.Logger | logging.LoggerAdapter[Any],
) -> None:
    with get_client(sync_client=True) as client:
        while not stop.wait(REFRESH_S):
            try:
                client.read_flow_run_input(run_id, key)
            except Exception:
                continue  # the pause has not saved its form yet
            try:
                # Prefect has no update for a run input: replace it.
                client.delete_flow_run_input(run_id, key)
                client.create_flow_run_input(run_id, key, json.dumps(render()))
            except Exception as exc:
                log.warning("could not refresh the downtime clock in the form: %s", exc)
