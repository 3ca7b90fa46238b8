"""The handoff's progress, kept on the Service it moves (annotations).

A crashed or killed run leaves the truth on the cluster, not in a process: the
pre-handoff snapshot (selector, replicas, and for an in-place handoff the previous
Deployment spec) and the last step reached. A rerun reads it and resumes; a
rollback restores from it. One transition table says which step may follow which.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flows.errors import PermanentError

ANNOTATION = "handoff.dev/ledger"
HISTORY_ANNOTATION = "handoff.dev/history"
REVISION_LABEL = "handoff.dev/revision"
HISTORY_KEEP = 10


class Phase(enum.StrEnum):
    """Declared in order: the forward phases, then rollback's two."""

    STARTED = "started"  # snapshot recorded, nothing else changed
    DOWNTIME_APPROVED = "downtime-approved"  # in place: a person accepted the outage
    OLD_STOPPED = "old-stopped"  # in place: the old pods are gone
    APPLIED = "applied"  # candidate applied at replicas 0, image pinned
    WARM = "warm"  # candidate pods Ready and answering
    GATED = "gated"  # gates passed
    APPROVED = "approved"
    SWAPPED = "swapped"  # Service selects only the candidate
    SCALED = "scaled"  # candidate at its target replicas
    RETIRED = "retired"  # old workloads at 0 (kept)
    DONE = "done"
    ROLLING_BACK = "rolling-back"
    ROLLED_BACK = "rolled-back"


TERMINAL = frozenset({Phase.DONE, Phase.ROLLED_BACK})
# Phases in which only the ledger may have been written (a rollback: unless `wrote`).
_BEFORE_FIRST_WRITE = frozenset({Phase.STARTED, Phase.DOWNTIME_APPROVED, Phase.ROLLING_BACK})

# The forward phases, in the order the enum declares them; rollback is entered from any.
_FORWARD: list[Phase] = [p for p in Phase if p not in (Phase.ROLLING_BACK, Phase.ROLLED_BACK)]


def can_enter(current: Phase, target: Phase) -> bool:
    """The transition table: forward one or more steps, or into rollback from anywhere live."""
    if current in TERMINAL:
        return False
    if target is Phase.ROLLING_BACK:
        return True
    if target is Phase.ROLLED_BACK:
        return current is Phase.ROLLING_BACK
    if current is Phase.ROLLING_BACK:
        return False
    return _FORWARD.index(target) >= _FORWARD.index(current)


def reached(current: Phase, step: Phase) -> bool:
    """The handoff has already passed `step` (so a resumed run skips it)."""
    if current in (Phase.ROLLING_BACK, Phase.ROLLED_BACK):
        return False
    return _FORWARD.index(current) >= _FORWARD.index(step)


class WorkloadSnapshot(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    replicas: int
    resource_version: str
    spec: dict[str, Any] | None = Field(None, description="kept only for in-place handoffs")
    # None in ledgers written before they were recorded: those fields are not compared.
    uid: str | None = None
    generation: int | None = Field(None, description="metadata.generation: spec changes")


class ServingWorkload(BaseModel):
    """One Deployment (or pods without one) behind the Service's ready addresses."""

    model_config = ConfigDict(frozen=True)

    deployment: str
    revision: str | None = None  # the pods' handoff.dev/revision label, if any
    ready: int

    def line(self) -> str:
        at = f" at revision {self.revision}" if self.revision else ""
        return f"Deployment {self.deployment}{at} ({self.ready} ready)"


class Snapshot(BaseModel):
    """The Service and workloads as they were before the first write."""

    model_config = ConfigDict(frozen=True)

    selector: dict[str, str]
    # None (no clusterIP) is left out of the annotation, so it must read back as missing.
    cluster_ip: str | None = None
    workloads: list[WorkloadSnapshot]
    candidate_existed: bool = False
    candidate_replicas: int = 0
    serving: list[ServingWorkload] = Field(
        default_factory=list,
        description="what the Service routed to when the handoff began (flows.serving)",
    )


class ApprovalRecord(BaseModel):
    """One answer a person (or --auto-approve) gave: every one is kept, in order."""

    model_config = ConfigDict(frozen=True)

    approver: str
    decision: str
    reason: str = ""
    what: str = Field(description="what was approved: the plan, the handoff after the gates")
    evidence_sha256: str = Field(description="hash of exactly what the approver was shown")
    at: str
    identity: str | None = Field(
        None, description="how the approver's name was established: signed, or typed"
    )


class OutageRecord(BaseModel):
    """In place: when the old pods were told to stop (epoch seconds) and what was declared."""

    model_config = ConfigDict(frozen=True)

    started: float
    estimate_s: float
    bound_s: float


class Ledger(BaseModel):
    """What the Service's ledger annotation holds."""

    model_config = ConfigDict(frozen=True)

    handoff_id: str
    spec: str
    phase: Phase
    strategy: str
    snapshot: Snapshot
    revision: str | None = None
    image: str | None = None
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    evidence_sha256: str | None = None
    outage: OutageRecord | None = None
    pin: dict[str, str] | None = Field(
        None, description="the live selector narrowed to the live pods, if the apply sets it"
    )
    rollback_pins: list[dict[str, str]] = Field(
        default_factory=list,
        description="selectors a rollback narrowed the Service to, each recorded before "
        "it was written: the rollback's own, told from a person's of the same shape",
    )
    wrote: bool = Field(
        False, description="the handoff wrote more than its ledger: a rollback has work to do"
    )
    candidate_uid: str | None = Field(None, description="the candidate Deployment it applied")
    candidate_template_sha256: str | None = Field(
        None, description="its pod template as the apiserver stored it at the apply"
    )
    edited: list[str] = Field(
        default_factory=list,
        description="objects a person changed during the handoff: the rollback leaves them",
    )
    cause: str | None = None
    started_at: str
    updated_at: str

    @property
    def first_write_made(self) -> bool:
        """Anything but the ledger was written (ledgers older than the flag: from the apply)."""
        return self.wrote or self.phase not in _BEFORE_FIRST_WRITE

    @property
    def approver(self) -> str | None:
        """Who approved last (every approval is in `approvals`)."""
        return self.approvals[-1].approver if self.approvals else None

    def to(self, phase: Phase, **changes: Any) -> Ledger:
        if not can_enter(self.phase, phase):
            raise PermanentError(
                f"handoff {self.handoff_id}: cannot go from {self.phase} to {phase}; "
                "inspect the Service's handoff.dev/ledger annotation or run `handoff rollback`"
            )
        return self.model_copy(update={"phase": phase, **changes})

    def dump(self) -> str:
        return self.model_dump_json(exclude_none=True)


def parse_ledger(annotations: dict[str, str]) -> Ledger | None:
    raw = annotations.get(ANNOTATION)
    return Ledger.model_validate_json(raw) if raw else None


def unfinished_in(annotations: dict[str, str]) -> Ledger | None:
    """The unfinished handoff these Service annotations record, if any (of any spec)."""
    ledger = parse_ledger(annotations)
    return ledger if ledger is not None and ledger.phase not in TERMINAL else None


class HistoryUnreadable(PermanentError):
    """The history annotation is not a JSON list of records; rewriting it would erase it."""


def history_entries(
    annotations: dict[str, str], *, where: str = "the Service"
) -> list[dict[str, Any]]:
    """The recorded handoffs, oldest first; [] when there are none yet.

    A malformed annotation raises: appending to it would replace the audit trail."""
    raw = annotations.get(HISTORY_ANNOTATION)
    if raw is None:
        return []
    try:
        value = json.loads(raw)
        problem = None if isinstance(value, list) else f"a JSON {type(value).__name__}"
    except ValueError as exc:
        value, problem = None, f"not JSON ({exc})"
    if problem is None and not all(isinstance(e, dict) for e in value):
        problem = "a list holding something other than records"
    if problem is not None:
        raise HistoryUnreadable(
            f"{where}: annotation {HISTORY_ANNOTATION} should be a JSON list of handoff "
            f"records but is {problem}: {raw[:200]!r}. Nothing was changed; save the "
            f"annotation's value, then repair it or remove it "
            f"(kubectl annotate service NAME {HISTORY_ANNOTATION}-) and run again"
        )
    records: list[dict[str, Any]] = value  # checked above: a list of dicts
    return records


def appended_history(annotations: dict[str, str], record: dict[str, Any]) -> str:
    """The history annotation with record added, keeping the newest HISTORY_KEEP."""
    entries = [*history_entries(annotations), record][-HISTORY_KEEP:]
    return json.dumps(entries, separators=(",", ":"))
