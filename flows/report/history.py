"""Handoff history: the records kept on Services (annotation) merged with the
handoff runs Prefect knows (flows/report/prefect_runs.py), oldest first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.kube import read
from flows.kube.client import connect
from flows.ledger import HISTORY_ANNOTATION, history_entries
from flows.report.prefect_runs import with_prefect_runs


def collect_history(
    kubeconfig: Path | None, *, namespace: str, service: str | None
) -> list[dict[str, Any]]:
    kube = connect(kubeconfig)
    try:
        services = read.list_services(kube, namespace)
    finally:
        kube.close()
    entries = [
        entry
        for svc in services
        if service in (None, svc.name)
        if HISTORY_ANNOTATION in svc.annotations
        for entry in history_entries(svc.annotations, where=f"Service {namespace}/{svc.name}")
    ]
    names = [s.name for s in services if service in (None, s.name)]
    return with_prefect_runs(sorted(entries, key=lambda e: e.get("finished_at", "")), names)
