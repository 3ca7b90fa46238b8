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
    ledger = Ledger(
        handoff_id=run_id,
        spec=spec.name,
        phase=Phase.STARTED,
        strategy=str(plan.strategy),
        snapshot=plan.snapshot(spec),
        pin=plan.pin_live_selector,
        started_at=now,
        updated_at=now,
    )
    return HandoffRun(kube=kube, spec=spec, plan=plan, ledger=save_ledger(kube, spec, ledger))
