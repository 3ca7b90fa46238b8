"""Step 6, approve: pause in the Prefect UI with the evidence, record who decided.

Observes nothing on the cluster; the decision is a person's (or --auto-approve's).
The form shows the gate summary and the evidence hash; the response (approver,
decision, reason) is stored by Prefect with the run, and the approver and hash go
into the ledger. A rerun that already passed approval does not ask again.
Prefect OSS has no user identity, so the approver types their name.
"""

from __future__ import annotations

from typing import Literal

from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput

from flows.errors import ApprovalRejected
from flows.ledger import Phase
from flows.progress import HandoffRun

AUTO_APPROVER = "auto-approve"
POLL_S = 2


class Approval(RunInput):
    """The form a person fills in to let the handoff continue."""

    approver: str
    decision: Literal["approve", "reject"] = "approve"
    reason: str = ""


class ApprovalTimedOut(ApprovalRejected):
    """Nobody answered within the spec's approval timeout."""


def request_approval(
    run: HandoffRun, *, what: str, summary: str, auto: bool, phase: Phase
) -> Approval:
    """Ask (or auto-approve) and record the answer; raise ApprovalRejected on no."""
    if run.reached(phase):
        return Approval(approver=run.ledger.approver or AUTO_APPROVER, reason="approved earlier")
    if auto or not run.spec.approval.required:
        answer = Approval(
            approver=AUTO_APPROVER,
            reason="--auto-approve" if auto else "approval not required by the spec",
        )
    else:
        answer = _ask(run, what=what, summary=summary)
    if answer.decision != "approve":
        raise ApprovalRejected(
            f"{what} rejected by {answer.approver}: {answer.reason or 'no reason given'}"
        )
    run.advance(phase, approver=answer.approver)
    return answer


def _ask(run: HandoffRun, *, what: str, summary: str) -> Approval:
    description = (
        f"## Approve {what}?\n\nHandoff `{run.ledger.handoff_id}` of Service "
        f"`{run.spec.namespace}/{run.spec.service}` ({run.plan.strategy}).\n\n{summary}\n\n"
        "Type your name, choose approve or reject, and give a reason."
    )
    form = Approval.with_initial_data(description=description, approver="", decision="approve")
    try:
        answer = pause_flow_run(
            wait_for_input=form,
            timeout=int(run.spec.approval.timeout_s),
            poll_interval=POLL_S,
            key=f"approve-{phase_key(what)}",
        )
    except FlowPauseTimeout as exc:
        raise ApprovalTimedOut(
            f"{what}: nobody approved within {run.spec.approval.timeout_s:g} s "
            "(approval.timeout_s in the spec)"
        ) from exc
    if not answer.approver.strip():
        return answer.model_copy(update={"decision": "reject", "reason": "no approver named"})
    return answer


def phase_key(what: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in what.lower()).strip("-")[:40]
