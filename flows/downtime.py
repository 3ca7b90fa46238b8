"""The downtime an in-place handoff declares, from named parts. Pure functions.

From the old pods' stop until the swap the Service has no ready endpoints. The plan
declares how long that lasts with a gate pass (the estimate: the old pods' grace,
the candidate's start, each gate's budget, an approval wait when the spec asks for
one during the outage, the swap), and the most it can last: the flow rolls back by
itself when the estimate runs out, and restoring the old pods (the candidate's
grace, the old pods' start) comes on top. Each part names what it was taken from.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from flows.render import split_image
from flows.spec import HandoffSpec

DEFAULT_GRACE_S = 30.0  # Kubernetes' terminationGracePeriodSeconds default
# Used when nothing bounds the start: no startupProbe and no start seen before.
DEFAULT_START_S = 300.0
# A start seen before is declared with this margin, and never below the floor.
START_MARGIN = 2.0
START_FLOOR_S = 10.0
RECENT_STARTS = 5
# The selector patch, the Endpoints following it and the proxies applying them.
SWAP_S = 10.0


class Part(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    seconds: float
    basis: str

    def line(self) -> str:
        return f"{self.name}: {self.seconds:.0f} s ({self.basis})"


class Downtime(BaseModel):
    """What the plan declares; `estimate_s` with a gate pass, `bound_s` at most."""

    model_config = ConfigDict(frozen=True)

    parts: list[Part]
    rollback: list[Part]

    @property
    def estimate_s(self) -> float:
        """With a gate pass; also the moment the flow stops waiting and rolls back."""
        return round(sum(p.seconds for p in self.parts), 1)

    @property
    def bound_s(self) -> float:
        """The most: the estimate run out, then the old pods restored."""
        return round(self.estimate_s + sum(p.seconds for p in self.rollback), 1)

    def markdown(self) -> str:
        lines = [
            f"**Declared downtime:** about {self.estimate_s:.0f} s with a gate pass, "
            f"at most {self.bound_s:.0f} s",
            *[f"  - {p.line()}" for p in self.parts],
            f"  - = {self.estimate_s:.0f} s; past it without a swap the flow rolls back "
            "by itself, and on any failure it restores the old workload:",
            *[f"  - rollback, {p.line()}" for p in self.rollback],
        ]
        return "\n".join(lines)


def container_of(pod_spec: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    containers = pod_spec.get("containers") or [{}]
    return next((c for c in containers if c.get("name") == name), containers[0])


def _grace(pod_specs: Iterable[dict[str, Any]], whose: str) -> Part:
    graces = [s.get("terminationGracePeriodSeconds") for s in pod_specs]
    seconds = max((float(g) for g in graces if g is not None), default=DEFAULT_GRACE_S)
    basis = (
        "terminationGracePeriodSeconds as set"
        if any(g is not None for g in graces)
        else "terminationGracePeriodSeconds, the default"
    )
    return Part(name=f"{whose} pods stop", seconds=seconds, basis=basis)


def _probe_bound(container: dict[str, Any]) -> float | None:
    """The longest the kubelet lets the container start: its startupProbe's budget
    plus one readiness period; None when no startupProbe bounds it."""
    startup = container.get("startupProbe")
    if not startup:
        return None
    readiness = container.get("readinessProbe") or {}
    return float(
        startup.get("initialDelaySeconds", 0)
        + startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
        + readiness.get("periodSeconds", 10)
    )


def start_part(container: dict[str, Any], seen_s: list[float], whose: str, seen_where: str) -> Part:
    """How long pods take from creation to Ready: a start seen before (with a margin),
    capped by the startupProbe's budget; that budget alone; else the default."""
    bound = _probe_bound(container)
    name = f"{whose} pods start"
    if seen_s:
        seen = max(START_FLOOR_S, START_MARGIN * max(seen_s))
        basis = (
            f"{START_MARGIN:g} x the longest of {len(seen_s)} start(s) {seen_where}, "
            f"{max(seen_s):.1f} s"
        )
        if bound is not None and bound < seen:
            return Part(name=name, seconds=bound, basis="startupProbe budget")
        return Part(name=name, seconds=seen, basis=basis)
    if bound is not None:
        return Part(name=name, seconds=bound, basis="startupProbe budget plus one readiness period")
    return Part(
        name=name,
        seconds=DEFAULT_START_S,
        basis=f"no startupProbe and no start {seen_where}: the default allowance",
    )


def gate_parts(spec: HandoffSpec) -> list[Part]:
    gates = spec.gates
    parts = [Part(name="smoke gate", seconds=gates.smoke_deadline_s, basis="smoke_deadline_s")]
    if gates.parity is not None:
        parts.append(
            Part(name="parity gate", seconds=gates.parity.budget_s, basis="parity.budget_s")
        )
    if gates.task is not None:
        parts.append(Part(name="task gate", seconds=gates.task.budget_s, basis="task.budget_s"))
    if gates.latency is not None:
        parts.append(
            Part(name="latency gate", seconds=gates.latency_budget_s, basis="latency_budget_s")
        )
    return parts


def declare(
    spec: HandoffSpec,
    manifest: dict[str, Any],
    live_pod_specs: list[dict[str, Any]],
    *,
    candidate_starts: list[float],
    live_starts: list[float],
) -> Downtime:
    """The declaration for an in-place handoff of `spec` with this candidate manifest.

    candidate_starts: recorded creation-to-Ready seconds of this image's earlier
    starts; live_starts: the same, observed on the live pods now running."""
    candidate_pod = manifest["spec"]["template"]["spec"]
    container = container_of(candidate_pod, spec.candidate.container)
    parts = [_grace(live_pod_specs, "old")]
    if spec.candidate.capacity_wait_s > 0:
        parts.append(
            Part(
                name="waiting for capacity",
                seconds=spec.candidate.capacity_wait_s,
                basis="candidate.capacity_wait_s, for Unschedulable pods",
            )
        )
    parts += [
        start_part(container, candidate_starts, "candidate", "of this image in the history"),
        *gate_parts(spec),
    ]
    if spec.approval.required and spec.approval.during_outage:
        parts.append(
            Part(
                name="a person's look at the gates",
                seconds=spec.approval.outage_timeout_s,
                basis="approval.outage_timeout_s; expiry rolls back",
            )
        )
    parts.append(Part(name="swap", seconds=SWAP_S, basis="selector patch and Endpoints"))
    live_container = container_of(live_pod_specs[0] if live_pod_specs else {})
    rollback = [
        _grace([candidate_pod], "candidate"),
        start_part(live_container, live_starts, "old", "observed on the live pods"),
    ]
    return Downtime(parts=parts, rollback=rollback)


def recorded_starts(entries: Iterable[dict[str, Any]], repository: str) -> list[float]:
    """Creation-to-Ready seconds of earlier candidates from `repository`, newest last."""
    starts = [
        float(e["candidate_start_s"])
        for e in entries
        if e.get("candidate_start_s") is not None
        and split_image(str(e.get("image") or ""))[0] == repository
    ]
    return starts[-RECENT_STARTS:]
