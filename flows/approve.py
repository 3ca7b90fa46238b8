"""Step 6, approve: pause in the Prefect UI with the evidence, record who decided.

Observes nothing on the cluster; the decision is a person's (or --auto-approve's).
The form shows what is to be approved (the plan, or the gates' evidence) and its
hash; the response (approver, decision, reason) is stored by Prefect with the run,
and every answer (who, when, what, the hash of what they were shown) is appended
to the ledger's approvals. A rerun that already passed approval does not ask again.
Prefect OSS has no user identity, so the approver types their name; a spec that lists
its approvers takes only approvals signed with their keys (flows.approval_identity), and
each record says how its name was established.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Literal

from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput

from flows.approval_identity import Answer, Identity, establish
from flows.errors import ApprovalRejected
from flows.ledger import ApprovalRecord, Phase
from flows.ledger_store import now_iso
from flows.pause_clock import ticking
from flows.report.links import run_link
from flows.run import HandoffRun

AUTO_APPROVER = "auto-approve"
POLL_S = 2
_NO_AUTO = (
    "--auto-approve refused: the spec lists approvers (approval.approvers), so only an "
    "approval signed by one of them lets the handoff go on; run without --auto-approve "
    "and answer with `handoff approve RUN_ID --approver NAME --key FILE`"
)


class Approval(RunInput):
    """The form a person fills in to let the handoff continue."""

    approver: str
    decision: Literal["approve", "reject"] = "approve"
    reason: str = ""
    signature: str = ""  # base64 Ed25519 over the answer: `handoff approve --key`


class ApprovalTimedOut(ApprovalRejected):
    """Nobody answered within the spec's approval timeout."""


def request_approval(
    run: HandoffRun,
    *,
    what: str,
    summary: str,
    auto: bool,
    phase: Phase,
    brief: str = "",
    evidence_sha256: str | None = None,
    timeout_s: float | None = None,
    timeout_setting: str = "approval.timeout_s",
    undecided: tuple[str, ...] = (),
) -> Approval:
    """Ask (or auto-approve) and record the answer; raise ApprovalRejected on no.
    The answer is bound to `evidence_sha256`, by default the hash of `summary`; `brief`
    is what the notification to the approver says of it. `undecided` names gates without
    a verdict: then a person is asked even where the spec requires no approval, and an
    auto-approval records that it approved over them."""
    if run.reached(phase):
        return Approval(approver=run.ledger.approver or AUTO_APPROVER, reason="approved earlier")
    asked = auto is False and (run.spec.approval.required or bool(undecided))
    if auto and run.spec.approval.approvers:
        answer = Approval(approver=AUTO_APPROVER, decision="reject", reason=_NO_AUTO)
        identity = Identity(verified=False, how="--auto-approve, refused")
    elif not asked:
        over = f", over gates without a verdict: {', '.join(undecided)}" if undecided else ""
        answer = Approval(
            approver=AUTO_APPROVER,
            reason=("--auto-approve" if auto else "approval not required by the spec") + over,
        )
        identity = Identity(verified=False, how="no person: " + answer.reason)
    else:
        timeout = (run.spec.approval.timeout_s if timeout_s is None else timeout_s, timeout_setting)
        _tell_approver(run, what=what, brief=brief, seconds=timeout[0])
        answer, identity = _ask(run, what=what, summary=summary, timeout=timeout)
    kept = ApprovalRecord(
        approver=answer.approver,
        decision=answer.decision,
        reason=answer.reason,
        what=what,
        evidence_sha256=evidence_sha256 or hashlib.sha256(summary.encode()).hexdigest(),
        at=now_iso(),
        identity=identity.how,
    )
    approvals = [*run.ledger.approvals, kept]
    if answer.decision != "approve":
        run.advance(run.ledger.phase, approvals=approvals)
        raise ApprovalRejected(
            f"{what} rejected by {answer.approver}: {answer.reason or 'no reason given'}"
        )
    run.advance(phase, approvals=approvals)
    return answer


def _tell_approver(run: HandoffRun, *, what: str, brief: str, seconds: float) -> None:
    if run.notifier is None:
        return
    from prefect.runtime import flow_run

    run_id = str(flow_run.id)
    run.notifier.send(
        "approval",
        f"handoff {run.spec.name} waits for approval of {what}",
        f"Handoff `{run.ledger.handoff_id}` of Service `{run.spec.namespace}/"
        f"{run.spec.service}` ({run.plan.strategy}) waits at most {seconds:g} s for a "
        f"person to approve {what}.\n\n{brief}\n\nApprove or reject: {run_link(run_id)} "
        f"(or `handoff approve {run_id} --approver NAME [--reject]{_key_hint(run)}`)",
    )


def _key_hint(run: HandoffRun) -> str:
    """Where the spec lists approvers, an approval counts only signed."""
    return " --key FILE" if run.spec.approval.approvers else ""


def _ask(
    run: HandoffRun, *, what: str, summary: str, timeout: tuple[float, str]
) -> tuple[Approval, Identity]:
    """Pause with the form (during an outage its description carries a running clock);
    the answer, and how its approver's name was established. An approval whose name the
    spec's approvers do not vouch for becomes a rejection; a rejection stands whoever
    gives it, since stopping is always safe."""
    from prefect.runtime import flow_run

    seconds, setting = timeout
    clock = run.outage if run.outage is not None and run.outage.running else None

    def describe() -> str:
        return (
            f"## Approve {what}?\n\nHandoff `{run.ledger.handoff_id}` of Service "
            f"`{run.spec.namespace}/{run.spec.service}` ({run.plan.strategy}).\n\n"
            + (f"{clock.text()}\n\n" if clock else "")
            + f"{summary}\n\n"
            + (
                "This spec takes only signed approvals: answer with `handoff approve "
                f"{flow_run.id} --approver NAME --key FILE` (a rejection may come from here)."
                if run.spec.approval.approvers
                else "Type your name, choose approve or reject, and give a reason."
            )
        )

    key = f"approve-{phase_key(what)}"
    form = Approval.with_initial_data(description=describe(), approver="", decision="approve")
    try:
        with ticking(key, describe) if clock else contextlib.nullcontext():
            answer = pause_flow_run(
                wait_for_input=form, timeout=max(1, int(seconds)), poll_interval=POLL_S, key=key
            )
    except FlowPauseTimeout as exc:
        raise ApprovalTimedOut(
            f"{what}: nobody approved within {seconds:g} s ({setting} in the spec)"
        ) from exc
    if not answer.approver.strip():
        answer = answer.model_copy(update={"decision": "reject", "reason": "no approver named"})
    signed = Answer(
        flow_run=str(flow_run.id),
        pause=key,
        decision=answer.decision,
        approver=answer.approver,
        reason=answer.reason,
    )
    identity = establish(run.spec.approval.approvers, signed, answer.signature)
    if answer.decision == "approve" and run.spec.approval.approvers and not identity.verified:
        refused = f"approval by {answer.approver!r} refused: {identity.how}"
        answer = answer.model_copy(update={"decision": "reject", "reason": refused})
    return answer, identity


def phase_key(what: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in what.lower()).strip("-")[:40]
