"""Handoff history from Prefect: flow runs tagged `service:<name>` and their artifacts.

The Service's history annotation holds the records of handoffs that got as far as
recording; Prefect also knows the runs that did not (superseded by a newer merge,
paused for approval, crashed before the record) and links to each run's report
(the `handoff-<service>` artifact). Both are merged by flow run id. Prefect is
optional here: without a reachable PREFECT_API_URL the cluster's records stand alone;
one that answers but refuses this process's credentials is an error (PrefectRefused).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import httpx
from pydantic import BaseModel

HANDOFF_FLOW = "handoff"
RUN_LIMIT = 200


class PrefectRun(BaseModel):
    """One handoff flow run as the history shows it."""

    flow_run_id: str
    name: str
    service: str | None
    spec: str | None
    state: str
    message: str | None
    started_at: str | None
    finished_at: str | None
    duration_s: float
    trigger: dict[str, Any] | None
    url: str
    report: str | None  # the handoff-<service> artifact's description

    def summary(self) -> dict[str, Any]:
        return self.model_dump(include={"name", "state", "message", "url", "report", "duration_s"})


def _iso(when: dt.datetime | None) -> str | None:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if when else None


def _tag(tags: list[str], prefix: str) -> str | None:
    return next((t.removeprefix(prefix) for t in tags if t.startswith(prefix)), None)


def api_url_if_reachable() -> str | None:
    """PREFECT_API_URL when set and answering /health, else None."""
    from prefect.settings import get_current_settings

    url = (get_current_settings().api.url or "").rstrip("/")
    if not url:
        return None
    try:
        return url if httpx.get(f"{url}/health", timeout=3.0).status_code == 200 else None
    except httpx.HTTPError:
        return None


def read_runs(services: list[str]) -> list[PrefectRun]:
    """The handoff runs of these Services, newest first, with their reports."""
    from prefect import get_client
    from prefect.client.schemas import filters
    from prefect.client.schemas.sorting import FlowRunSort

    from flows.report.links import run_link

    tags = filters.FlowRunFilterTags(any_=[f"service:{s}" for s in services])
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_filter=filters.FlowFilter(name=filters.FlowFilterName(any_=[HANDOFF_FLOW])),
            flow_run_filter=filters.FlowRunFilter(tags=tags),
            sort=FlowRunSort.START_TIME_DESC,
            limit=RUN_LIMIT,
        )
        artifacts = client.read_artifacts(
            artifact_filter=filters.ArtifactFilter(
                key=filters.ArtifactFilterKey(any_=[f"handoff-{s}" for s in services]),
                flow_run_id=filters.ArtifactFilterFlowRunId(any_=[r.id for r in runs]),
            )
        )
    reports = {str(a.flow_run_id): a.description for a in artifacts}
    return [
        PrefectRun(
            flow_run_id=str(r.id),
            name=r.name,
            service=_tag(r.tags, "service:"),
            spec=_tag(r.tags, "handoff:"),
            state=r.state.name if r.state else "Unknown",
            message=r.state.message if r.state else None,
            started_at=_iso(r.start_time),
            finished_at=_iso(r.end_time),
            duration_s=round(r.total_run_time.total_seconds(), 1),
            trigger=r.parameters.get("trigger"),
            url=run_link(str(r.id)),
            report=reports.get(str(r.id)),
        )
        for r in runs
    ]


def merge_history(records: list[dict[str, Any]], runs: list[PrefectRun]) -> list[dict[str, Any]]:
    """Pure: the cluster's records with their runs attached, plus the runs that left no
    record (outcome = the run's state), oldest first."""
    by_id = {r.flow_run_id: r for r in runs}
    merged = [
        {**e, "prefect": by_id[e["flow_run_id"]].summary()} if e.get("flow_run_id") in by_id else e
        for e in records
    ]
    recorded = {e.get("flow_run_id") for e in records}
    merged += [_from_run(r) for r in runs if r.flow_run_id not in recorded]
    return sorted(merged, key=lambda e: e.get("finished_at") or e.get("started_at") or "")


def _from_run(run: PrefectRun) -> dict[str, Any]:
    superseded = (run.message or "").startswith("superseded")
    return {
        "handoff_id": run.flow_run_id,
        "spec": run.spec,
        "service": run.service,
        "outcome": "superseded" if superseded else run.state.lower(),
        "cause": run.message,
        "trigger": run.trigger,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "flow_run_id": run.flow_run_id,
        "recorded_on_service": False,
        "prefect": run.summary(),
    }


def with_prefect_runs(records: list[dict[str, Any]], services: list[str]) -> list[dict[str, Any]]:
    """records merged with the Services' Prefect runs, when Prefect answers."""
    from flows.prefect_access import require_access

    api = api_url_if_reachable() if services else None
    if api is None:
        return records
    require_access(api)
    return merge_history(records, read_runs(services))
