"""The audit view merges both sources by flow run id: a record on the Service gets its
Prefect run attached, a run that left no record (superseded, paused, crashed) appears
with its state as the outcome, and everything is ordered by time."""

from __future__ import annotations

from flows.report.prefect_runs import PrefectRun, merge_history


def _run(run_id: str, state: str, *, message: str | None = None, at: str) -> PrefectRun:
    return PrefectRun(
        flow_run_id=run_id,
        name=f"run-{run_id}",
        service="clef-serve",
        spec="clef-candle",
        state=state,
        message=message,
        started_at=at,
        finished_at=at if state != "Paused" else None,
        duration_s=12.5,
        trigger={"source": "forgejo", "delivery_id": f"d-{run_id}", "merge_commit": "c" * 40},
        url=f"http://127.0.0.1:4200/runs/flow-run/{run_id}",
        report="handoff clef-candle: done" if state == "Completed" else None,
    )


def test_records_and_runs_merge_by_flow_run_id() -> None:
    records = [
        {
            "handoff_id": "r1",
            "flow_run_id": "r1",
            "outcome": "done",
            "approver": "ada",
            "finished_at": "2026-11-29T10:05:00Z",
        },
        {"handoff_id": "cli", "outcome": "rolled-back", "finished_at": "2026-11-29T09:00:00Z"},
    ]
    runs = [
        _run("r1", "Completed", at="2026-11-29T10:05:00Z"),
        _run(
            "r0", "Cancelled", message="superseded: merge 2222 is newer", at="2026-11-29T10:00:01Z"
        ),
        _run("r2", "Paused", at="2026-11-29T10:10:00Z"),
    ]
    merged = merge_history(records, runs)
    assert [e["handoff_id"] for e in merged] == ["cli", "r0", "r1", "r2"]
    cli, superseded, done, paused = merged
    assert "prefect" not in cli
    assert done["approver"] == "ada" and done["prefect"]["report"] == "handoff clef-candle: done"
    assert superseded["outcome"] == "superseded" and superseded["recorded_on_service"] is False
    assert superseded["trigger"]["delivery_id"] == "d-r0"
    assert paused["outcome"] == "paused" and paused["prefect"]["state"] == "Paused"


def test_without_runs_the_records_stand_alone() -> None:
    records = [{"handoff_id": "a", "outcome": "done", "finished_at": "2026-11-29T10:00:00Z"}]
    assert merge_history(records, []) == records
