"""The matrix: which fault is injected at which step, and what each cell may end in.

Every step where a fault can happen to the clef-candle handoff (side by side) is listed
for it. The plan and the apply last well under a second, so they are caught by what the
run writes as it enters them rather than by its ledger: the plan once the run holds its
Service's Prefect slot (its turn: it plans next) and before it takes the Lease (checked
at the injection), the apply once a watch sees the candidate Deployment created at 0
replicas. A kill there lands before the run's first write, or between its apply and the
warm-up; an API server outage started there is met by the plan's reads, or by the
apply's ledger write and its closing check.

The coder-14b-fp16 handoff goes in place (one GPU: its old pods stop before the
candidate starts, a downtime the plan declares): its cells hit the step that stops the
old pods (the apply: the ledger records the outage's start and not yet the candidate
applied). There the rule is that the Service selects one
ready workload or none only inside a declared outage: clients' failures and empty
Endpoints are allowed only from the old pods' stop for at most the declared bound.
"""

from __future__ import annotations

from tests.faults import faults
from tests.faults.harness import (
    DONE,
    IN_PLACE,
    ROLLED_BACK,
    SCALE_AFTER_RETIRE,
    STOPPED,
    Cell,
)

ANY = frozenset({DONE, ROLLED_BACK, STOPPED})
FLOW_STEPS = ("image wait", "warm", "gates", "approval wait", "swap", "scale", "retire")


def _after_rollback(step: str) -> str:
    """With gates made to fail, a rerun rolls back again: that is its converged state."""
    return ROLLED_BACK if step == "rollback" else DONE


def _edits(fault: str, inject: faults.Fault, cause: str, steps: tuple[str, ...]) -> list[Cell]:
    """A person's edit: noticed, named in the cause, and rolled back around."""
    return [Cell(fault, step, inject, frozenset({ROLLED_BACK}), cause=cause) for step in steps]


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
    # The plan and the apply, caught as the run enters them.
    # The plan lasts a moment: the run kills itself as it begins it.
    Cell(
        "flow SIGKILL",
        "plan",
        faults.killed_itself,
        frozenset({STOPPED}),
        at="flows.session:make_plan",
    ),
    Cell("flow SIGKILL", "apply", faults.sigkill, frozenset({STOPPED})),
    *(
        Cell("kube-apiserver down 10 s", step, faults.apiserver_down(10), ANY)
        for step in ("plan", "apply")
    ),
    # In place: the old pods stopping (the outage begins).
    Cell(
        "flow SIGKILL",
        "in place: old pods stop",
        faults.sigkill,
        frozenset({STOPPED}),
        target=IN_PLACE,
    ),
    Cell(
        "flow SIGTERM",
        "in place: old pods stop",
        faults.sigterm,
        frozenset({ROLLED_BACK}),
        target=IN_PLACE,
    ),
    Cell(
        "kube-apiserver down 10 s",
        "in place: old pods stop",
        faults.apiserver_down(10),
        ANY,
        target=IN_PLACE,
    ),
    *(
        Cell("kube-apiserver down 20 s (Lease 15 s)", step, faults.apiserver_down(20), ANY)
        for step in ("gates", "swap", "scale")
    ),
    *(
        Cell("etcd SIGSTOP 5 s", step, faults.etcd_paused, ANY)
        for step in ("gates", "swap", "scale", "retire")
    ),
    *(
        Cell("Prefect server restarted", step, faults.prefect_restarted, ANY)
        for step in ("gates", "approval wait")
    ),
    Cell(
        "candidate pod killed", "gates", faults.kill_candidate_pod, frozenset({DONE, ROLLED_BACK})
    ),
    *_edits(
        "person scales live Deployment",
        faults.scale_live,
        "clef-serve spec.replicas",
        ("image wait", "gates", "approval wait"),
    ),
    *_edits(
        "person scales candidate Deployment",
        faults.scale_candidate,
        "clef-candle spec.replicas",
        ("gates", "approval wait"),
    ),
    # Not at the scale: with the candidate already at its count, the scale-up is over
    # before an edit could land in it.
    *_edits(
        "person edits Service selector",
        faults.edit_selector,
        "clef-serve spec.selector",
        ("image wait", "gates", "approval wait"),
    ),
    *_edits(
        "person deletes candidate Deployment",
        faults.delete_candidate,
        "clef-candle was deleted",
        ("warm", "gates", "approval wait"),
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
    # The registry answers 503 for 6 s, then leaves requests hanging past the client's
    # timeout (tests/faults/faults.py); the tag is published once it answers again.
    Cell(
        "registry 503/timeouts, recovering",
        "image wait",
        faults.registry_unavailable_recovering,
        frozenset({DONE}),
        registry_front=True,
    ),
    # Still failing when the (short) image timeout passes: the run ends before applying
    # anything (its ledger says rolled back, with nothing to undo), naming the registry;
    # the rerun, with the registry back, is done.
    Cell(
        "registry 503/timeouts past the image timeout",
        "image wait",
        faults.registry_unavailable_past_timeout,
        frozenset({ROLLED_BACK}),
        cause="was unavailable when the wait for image",
        registry_front=True,
        image_timeout_s=30.0,
    ),
    # The candidate's GPU node loses its kubelet during the warm-up. A loss shorter than
    # the node controller's grace period (40 s) is never seen: the warm-up waits on. Once
    # the node is NotReady the candidate cannot become Ready there until it is back, so
    # the warm-up stops at once (not at its ten-minute startup allowance) naming the node,
    # and rolls back; the rerun, with the node back, is done.
    Cell(
        "candidate's GPU node NotReady",
        "warm",
        faults.candidate_node_lost,
        frozenset({ROLLED_BACK}),
        cause="which is NotReady",
    ),
    # The same spec run again once a run has ended (a second merge, a retry, a person
    # making sure): a done handoff stays done, one whose gates still fail rolls back
    # again; neither moves the Service's selector or the live workload.
    Cell("same spec run again", "done", faults.nothing, frozenset({DONE}), run_again=True),
    Cell(
        "same spec run again",
        "rolled back",
        faults.nothing,
        frozenset({ROLLED_BACK}),
        rerun=ROLLED_BACK,
        run_again=True,
    ),
    # The selector edited while the swap waits for the routes to follow its own write.
    *_edits(
        "person edits Service selector",
        faults.edit_selector,
        "clef-serve spec.selector",
        ("swap: routes wait",),
    ),
    # A Prefect process worker cancelling: SIGTERM, and SIGKILL once its grace is over.
    *(
        Cell(
            "worker cancels (SIGTERM, SIGKILL 30 s later)",
            step,
            faults.sigterm_then_sigkill(30),
            frozenset({ROLLED_BACK, STOPPED}),
            rerun=_after_rollback(step),
        )
        for step in ("gates", "scale", "rollback")
    ),
    # A target that fits only after the retirement, and the GPU node cordoned as the live
    # pods stop: the scale-up cannot be scheduled, the Service stays on the candidate at
    # its preview size while the live workload, restored, waits for the node (30 s,
    # until it is uncordoned), and only then moves back.
    Cell(
        "GPU node cordoned",
        "retire before scale-up",
        faults.node_cordoned_at_retirement,
        frozenset({ROLLED_BACK}),
        cause="Unschedulable",
        target=SCALE_AFTER_RETIRE,
    ),
    # The kube-apiserver stopped, not killed, for longer than the Lease: the run's writes
    # and renewals hang in flight (no refusal to retry on) until the fencing cuts them.
    *(
        Cell(
            "kube-apiserver SIGSTOP 20 s (Lease 15 s)",
            step,
            faults.paused("kube-apiserver", 20),
            ANY,
        )
        for step in ("swap", "scale")
    ),
]
