"""Read and write the handoff ledger on the Service, and hold the handoff's context.

Every phase change is one merge patch of the Service's annotations, guarded by the
resourceVersion last read and retried on 409 by re-reading: a concurrent writer is
never overwritten blindly.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flows.errors import PermanentError
from flows.kube import read, write
from flows.kube.client import Conflict, Kube
from flows.ledger import ANNOTATION, TERMINAL, Ledger, Phase, parse_ledger
from flows.outage import OutageClock
from flows.plan import Plan
from flows.spec import HandoffSpec
from flows.timeline import ReadyEndpoints, StepSpan

if TYPE_CHECKING:
    from flows.notify import Notifier


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_ledger(kube: Kube, spec: HandoffSpec) -> Ledger | None:
    service = read.read_service(kube, spec.namespace, spec.service)
    return parse_ledger(service.annotations)


def save_ledger(
    kube: Kube, spec: HandoffSpec, ledger: Ledger, *, extra: dict[str, str | None] | None = None
) -> Ledger:
    """Write the ledger (and any extra annotations) with a resourceVersion precondition."""
    stamped = ledger.model_copy(update={"updated_at": now_iso()})

    def changes(annotations: dict[str, str]) -> dict[str, str | None]:
        on_cluster = parse_ledger(annotations)
        if (
            on_cluster is not None
            and on_cluster.handoff_id != ledger.handoff_id
            and on_cluster.phase not in TERMINAL
        ):
            raise PermanentError(
                f"Service {spec.namespace}/{spec.service} is held by handoff "
                f"{on_cluster.handoff_id} ({on_cluster.phase}), not {ledger.handoff_id}: "
                "another run took over; stop this one"
            )
        return {ANNOTATION: stamped.dump(), **(extra or {})}

    try:
        write.update_service_annotations(kube, spec.namespace, spec.service, changes)
    except Conflict as exc:
        raise PermanentError(f"could not record phase {ledger.phase}: {exc}") from exc
    return stamped


@dataclass
class HandoffRun:
    """What every step of one handoff needs: the cluster, the spec, the plan, the ledger."""

    kube: Kube
    spec: HandoffSpec
    plan: Plan
    ledger: Ledger
    timings: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    outage: OutageClock | None = None  # in place, from the old pods' stop to the swap
    notifier: Notifier | None = None  # the spec's notify.block
    spans: list[StepSpan] = field(default_factory=list)  # each step's start and length
    ready: ReadyEndpoints | None = None  # the Service's ready endpoints, sampled

    def advance(self, phase: Phase, **changes: Any) -> None:
        """Record that the handoff reached `phase` (no-op if it already had)."""
        if self.reached(phase) and not changes:
            return
        self.ledger = save_ledger(self.kube, self.spec, self.ledger.to(phase, **changes))

    def limit(self, seconds: float) -> float:
        """A wait's deadline, cut to what is left of the declared outage (in place)."""
        return self.outage.limit(seconds) if self.outage else seconds

    @property
    def candidate_name(self) -> str:
        """The Deployment being warmed and gated (a twin when replacing side by side)."""
        from flows.render import candidate_name

        return candidate_name(self.spec, self.ledger.strategy)

    @property
    def twin(self) -> bool:
        from flows.render import is_twin

        return is_twin(self.spec, self.ledger.strategy)

    def reached(self, phase: Phase) -> bool:
        from flows.ledger import reached

        return reached(self.ledger.phase, phase)
