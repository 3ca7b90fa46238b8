"""The context one handoff carries from step to step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flows.kube.client import Kube
from flows.ledger import Ledger, Phase
from flows.ledger_store import save_ledger
from flows.outage import OutageClock
from flows.plan import Plan
from flows.report.timeline import ReadyEndpoints, StepSpan
from flows.spec import HandoffSpec

if TYPE_CHECKING:
    from flows.bake_report import BakeReport
    from flows.drain import Drained
    from flows.evidence import Evidence
    from flows.image import PinnedImage
    from flows.report.notify import Notifier
    from flows.wayback import WayBack


@dataclass
class HandoffRun:
    """What every step of one handoff needs: the cluster, the spec, the plan, the ledger,
    and what the steps learn on the way for the later steps and the record."""

    kube: Kube
    spec: HandoffSpec
    plan: Plan
    ledger: Ledger
    timings: dict[str, float] = field(default_factory=dict)
    pinned: PinnedImage | None = None  # what the image wait pinned (None: resumed past it)
    evidence: Evidence | None = None  # the gates' verdicts, failed ones too
    candidate_start_s: float | None = None  # scale to Ready, the first time it was waited
    downtime_measured_s: float | None = None  # in place: no endpoints, old stop to swap
    on_progress: Callable[[float], object] | None = None  # told each step's share of the run
    outage: OutageClock | None = None  # in place, from the old pods' stop to the swap
    notifier: Notifier | None = None  # the spec's notify.block
    spans: list[StepSpan] = field(default_factory=list)  # each step's start and length
    ready: ReadyEndpoints | None = None  # the Service's ready endpoints, sampled
    workloads: dict[str, str] = field(default_factory=dict)  # whose they are: role, Deployment
    bake: BakeReport | None = None  # what the bake watched and decided (None: no bake)
    # Signals held back while the ledger was first written, delivered as the steps begin.
    cancelled: list[int] = field(default_factory=list)
    # Why the run had nothing to do: the Service already served the spec's revision.
    nothing_to_do: str | None = None
    drains: list[Drained] = field(default_factory=list)  # each workload's drain before it stopped
    way_back: list[WayBack] = field(default_factory=list)  # the retired workloads' restart cost

    def advance(self, phase: Phase, **changes: Any) -> None:
        """Record that the handoff reached `phase` (no-op if it already had)."""
        if self.reached(phase) and not changes:
            return
        self.ledger = save_ledger(
            self.kube, self.spec, self.ledger.to(phase, **changes), since=self.ledger
        )

    def limit(self, seconds: float) -> float:
        """A wait's deadline, cut to what is left of the declared outage (in place)."""
        return self.outage.limit(seconds) if self.outage else seconds

    def recorded_replicas(self, name: str) -> set[int]:
        """A live Deployment's count before the first write: the one its scale-down
        decides from (any other is someone else's)."""
        return {w.replicas for w in self.ledger.snapshot.workloads if w.name == name}

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
