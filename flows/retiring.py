"""Before a workload's pods go down: what the run records and waits for.

The way back (flows/wayback.py) is recorded before the old pods stop; the drain
(flows/drain.py) waits for their generations once the routes are gone.
"""

from __future__ import annotations

from collections.abc import Iterable

from flows.drain import drain
from flows.kube import read
from flows.run import HandoffRun
from flows.wayback import WayBack, way_back


def drain_workloads(run: HandoffRun, names: Iterable[str], *, connections: bool = True) -> None:
    """Drain each of the run's workloads `names`, recording what was seen on the run.
    Client connections are counted (by exec) only where the spec allows it."""
    for name in names:
        found = drain(
            run.kube,
            run.spec.namespace,
            run.spec.service,
            name,
            port=run.spec.candidate.port,
            connections=connections and run.spec.retire.drain_connections,
        )
        if found is not None:
            run.drains.append(found)


def of_run(run: HandoffRun) -> list[WayBack]:
    """The way back of the run's old workloads, as they are now."""
    current = [read.read_deployment(run.kube, run.spec.namespace, d.name) for d in run.plan.current]
    return way_back(run.kube, run.spec.namespace, [d for d in current if d is not None])


def record_way_back(run: HandoffRun) -> None:
    """Before the old pods stop: what bringing them back would cost, for the record."""
    run.way_back = of_run(run)


def approval_note(run: HandoffRun) -> str:
    """For the approver of a side-by-side handoff: what going back will cost once the old
    workloads are retired ('' in place, where the plan's declared downtime says it)."""
    if run.spec.replaces_live or not run.plan.current or run.ledger.strategy == "in-place":
        return ""
    lines = [f"- {w.line()}" for w in of_run(run)]
    return "\n\n**The way back once retired** (kept at 0 replicas, a cold start):\n" + "\n".join(
        lines
    )
