"""The matrix: which fault is injected at which step, and what each cell may end in.

Every step where a fault can happen to the clef-candle handoff (side by side) is listed
for it; the plan and the apply are left out because they are too short to stop at from
outside (a kill there is a kill before the ledger, or at `applied`, which `warm` covers).
"""

from __future__ import annotations

from tests.faults import faults
from tests.faults.harness import DONE, ROLLED_BACK, STOPPED, Cell

ANY = frozenset({DONE, ROLLED_BACK, STOPPED})
FLOW_STEPS = ("image wait", "warm", "gates", "approval wait", "swap", "scale", "retire")


def _after_rollback(step: str) -> str:
    """With gates made to fail, a rerun rolls back again: that is its converged state."""
    return ROLLED_BACK if step == "rollback" else DONE


CELLS: list[Cell] = [
    *(
        Cell(
            "flow SIGKILL", step, faults.sigkill, frozenset({STOPPED}), rerun=_after_rollback(step)
        )
        for step in (*FLOW_STEPS, "rollback")
    ),
    *(
        Cell(
            "flow SIGTERM",
            step,
            faults.sigterm,
            frozenset({ROLLED_BACK, STOPPED}) if step == "rollback" else frozenset({ROLLED_BACK}),
            rerun=_after_rollback(step),
        )
        for step in (*FLOW_STEPS, "rollback")
    ),
    *(
        Cell("kube-apiserver down 10 s", step, faults.apiserver_down(10), ANY)
        for step in ("gates", "swap", "scale", "retire")
    ),
    *(
        Cell("kube-apiserver down 20 s (Lease 15 s)", step, faults.apiserver_down(20), ANY)
        for step in ("gates", "swap", "scale")
    ),
    *(
        Cell("etcd SIGSTOP 5 s", step, faults.etcd_paused, ANY)
        for step in ("gates", "swap", "scale", "retire")
    ),
    Cell(
        "candidate pod killed", "gates", faults.kill_candidate_pod, frozenset({DONE, ROLLED_BACK})
    ),
    *(
        Cell(
            "person scales live Deployment",
            step,
            faults.scale_live,
            frozenset({ROLLED_BACK}),
            cause="clef-serve spec.replicas",
        )
        for step in ("image wait", "gates", "approval wait")
    ),
    *(
        Cell(
            "person edits Service selector",
            step,
            faults.edit_selector,
            frozenset({ROLLED_BACK}),
            cause="clef-serve spec.selector",
        )
        for step in ("image wait", "gates", "approval wait", "scale")
    ),
    *(
        Cell(
            "person deletes candidate Deployment",
            step,
            faults.delete_candidate,
            frozenset({ROLLED_BACK}),
            cause="clef-candle was deleted",
        )
        for step in ("warm", "gates", "approval wait")
    ),
    *(
        Cell(
            "Service deleted",
            step,
            faults.delete_service,
            frozenset({STOPPED}),
            cause="not recreated",
            rerun=STOPPED,
            clients_may_fail=True,
            service_gone=True,
        )
        for step in ("gates", "approval wait", "swap")
    ),
]

# Run by default (a few minutes together): a person's edit during the long image wait
# (the stale-plan case) and the Service deleted mid-handoff.
DEFAULT = {
    ("person scales live Deployment", "image wait"),
    ("Service deleted", "gates"),
}
