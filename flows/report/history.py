"""Handoff history: the records kept on Services (annotation) merged with the
handoff runs Prefect knows (flows/report/prefect_runs.py), oldest first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.kube.client import connect, mapped
from flows.ledger import HISTORY_ANNOTATION, history_entries
from flows.report.prefect_runs import with_prefect_runs


def collect_history(
    kubeconfig: Path | None, *, namespace: str, service: str | None
) -> list[dict[str, Any]]:
    kube = connect(kubeconfig)
    try:
        with mapped(f"list Services in {namespace}"):
            services = kube.core.list_namespaced_service(namespace).items
        entries = [
            entry
            for svc in services
            if service in (None, svc.metadata.name)
            if HISTORY_ANNOTATION in (svc.metadata.annotations or {})
            for entry in history_entries(
                svc.metadata.annotations, where=f"Service {namespace}/{svc.metadata.name}"
            )
        ]
    finally:
        kube.close()
    names = [s.metadata.name for s in services if service in (None, s.metadata.name)]
    return with_prefect_runs(sorted(entries, key=lambda e: e.get("finished_at", "")), names)
