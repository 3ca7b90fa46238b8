"""Reading flow runs back from a real Prefect server, waiting on their states."""

from __future__ import annotations

import time
from collections.abc import Callable

from prefect import get_client
from prefect.client.schemas import filters
from prefect.client.schemas.objects import FlowRun
from prefect.settings import PREFECT_API_URL, temporary_settings


def read_runs(api_url: str, **filter_fields: object) -> list[FlowRun]:
    """Flow runs matching FlowRunFilter(**filter_fields), oldest first."""
    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=filters.FlowRunFilter(**filter_fields))
    return sorted(runs, key=lambda r: r.created or 0)


def wait_runs(
    api_url: str,
    until: Callable[[list[FlowRun]], bool],
    *,
    timeout_s: float,
    what: str,
    **filter_fields: object,
) -> list[FlowRun]:
    """Poll the matching runs until `until(runs)`; fail naming what was awaited and seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = read_runs(api_url, **filter_fields)
        if until(runs):
            return runs
        if time.monotonic() > deadline:
            seen = [(r.name, r.state.name if r.state else None) for r in runs]
            raise AssertionError(
                f"timed out after {timeout_s:.0f} s waiting for {what}; saw {seen}"
            )
        time.sleep(1.0)


def state_of(run: FlowRun) -> str:
    return run.state.name if run.state else "?"


def by_name(name: str) -> dict[str, object]:
    return {"name": filters.FlowRunFilterName(any_=[name])}
