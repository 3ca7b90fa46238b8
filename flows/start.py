"""Start a handoff, or resume the unfinished one recorded on the Service.

Observes the Service's ledger. Decides: no ledger (or a finished one) starts a new
handoff with the plan's snapshot; an unfinished ledger of the same spec is resumed
with its own snapshot and strategy (the cluster is mid-handoff, so a fresh snapshot
would be wrong); an unfinished ledger of another spec refuses. Changes: writes the
new ledger (phase `started`) only.
"""

from __future__ import annotations

from flows.capacity import Decision
from flows.errors import PermanentError
from flows.kube.client import Kube
from flows.lease import HandoffInProgress
from flows.ledger import Ledger, Phase, unfinished_in
from flows.ledger_store import now_iso, save_ledger
from flows.outage import OutageClock
from flows.plan import Plan, PlanRefused, read_target_service
from flows.render import compute_revision
from flows.run import HandoffRun
from flows.spec import HandoffSpec


class RollbackUnfinished(PermanentError):
    """The resumed handoff had started rolling back: it is finished, never resumed forward."""


def ensure_not_rolling_back(ledger: Ledger) -> None:
    """A run that stopped mid-rollback is resumed by finishing the rollback (raising sends
    the flow there) instead of by walking the steps forward again."""
    if ledger.phase is Phase.ROLLING_BACK:
        raise RollbackUnfinished(
            f"handoff {ledger.handoff_id} stopped while rolling back; finishing the rollback "
            f"(cause: {ledger.cause or 'not recorded'})"
        )


def unfinished(kube: Kube, spec: HandoffSpec) -> Ledger | None:
    """The Service's unfinished handoff, if any (of any spec)."""
    return unfinished_in(read_target_service(kube, spec).annotations)


def start_or_resume(kube: Kube, spec: HandoffSpec, plan: Plan, *, run_id: str) -> HandoffRun:
    ledger = unfinished(kube, spec)
    if ledger is not None:
        if ledger.spec != spec.name:
            raise HandoffInProgress(
                f"Service {spec.namespace}/{spec.service} has an unfinished handoff "
                f"{ledger.handoff_id} of spec {ledger.spec!r} at phase {ledger.phase}: "
                f"run `handoff rollback` with that spec (or let it finish) first"
            )
        if ledger.phase is not Phase.ROLLING_BACK:
            ensure_same_candidate(spec, plan, ledger)
        resumed = plan.model_copy(
            update={
                "decision": Decision(
                    strategy=ledger.strategy, reasons=[f"resumed at phase {ledger.phase}"]
                )
            }
        )
        run = HandoffRun(kube=kube, spec=spec, plan=resumed, ledger=ledger)
        if ledger.outage is not None and not run.reached(Phase.SWAPPED):
            run.outage = OutageClock(**ledger.outage.model_dump())  # it kept running
        return run
    if plan.refused:
        raise PlanRefused(f"handoff {spec.name} refused, nothing written: {plan.refused}")
    now = now_iso()
    done = plan.nothing_to_do
    ledger = Ledger(
        handoff_id=run_id,
        spec=spec.name,
        phase=Phase.DONE if done else Phase.STARTED,
        cause=done,
        strategy=str(plan.strategy),
        snapshot=plan.snapshot(spec),
        pin=plan.pin_live_selector,
        started_at=now,
        updated_at=now,
    )
    if done:  # nothing is written: the finished handoff's ledger stays on the Service
        return HandoffRun(kube=kube, spec=spec, plan=plan, ledger=ledger, nothing_to_do=done)
    return HandoffRun(kube=kube, spec=spec, plan=plan, ledger=save_ledger(kube, spec, ledger))


class CandidateChanged(PermanentError):
    """A resumed handoff would deploy another template than the one it gated."""


def ensure_same_candidate(spec: HandoffSpec, plan: Plan, ledger: Ledger) -> None:
    """A resumed run applies the manifest it reads now under the ledger's revision label:
    they must be the same template, or ungated pods would carry the gated revision."""
    if ledger.revision is None or ledger.image is None:
        return  # not applied yet: the resumed run renders and records it afresh
    now = compute_revision(spec, plan.manifest, ledger.image)
    if now != ledger.revision:
        raise CandidateChanged(
            f"handoff {ledger.handoff_id} of Service {spec.namespace}/{spec.service} applied "
            f"and gated revision {ledger.revision} (image {ledger.image}), but "
            f"{spec.candidate.manifest} now renders revision {now}: resuming would run an "
            "ungated template under the gated label. Nothing was written; run `handoff "
            "rollback` with this spec, then run the handoff again to gate the new manifest"
        )
