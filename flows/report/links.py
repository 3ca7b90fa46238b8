"""Addresses in the Prefect UI that the handoff gives people."""

from __future__ import annotations

from prefect.settings import PREFECT_UI_URL


def run_link(flow_run_id: str) -> str:
    """The flow run's page in the Prefect UI."""
    ui = (PREFECT_UI_URL.value() or "").rstrip("/")
    return f"{ui}/runs/flow-run/{flow_run_id}"
