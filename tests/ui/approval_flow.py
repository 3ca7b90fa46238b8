"""A flow that pauses for the handoff's approval form (flows.approve.Approval) and
writes the answer it was resumed with to a file:
`python -m tests.ui.approval_flow RUN_NAME OUT`."""

from __future__ import annotations

import sys
from pathlib import Path

from prefect import flow
from prefect.flow_runs import pause_flow_run

from flows.approve import Approval


@flow(name="approval-form")
def approval_form(out: str) -> None:
    form = Approval.with_initial_data(
        description="## Approve gates?\n\nparity ok, latency ok; evidence sha256 `abc123`",
        approver="",
        decision="approve",
    )
    answer = pause_flow_run(wait_for_input=form, timeout=300, poll_interval=1, key="approve-gates")
    Path(out).write_text(answer.model_dump_json())


if __name__ == "__main__":
    approval_form.with_options(flow_run_name=sys.argv[1])(sys.argv[2])
