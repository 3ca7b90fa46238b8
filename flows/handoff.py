"""The handoff flow: one Service, from its current workload to a candidate.

Reads like the runbook; every step lives in its own module (see flows/tasks.py).
Any failure after the first write rolls back from the snapshot on the Service.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from prefect import flow, get_run_logger
from prefect.exceptions import Abort, TerminationSignal
from prefect.runtime import deployment
from prefect.states import Cancelled

from flows import signals
from flows.newest import Superseded, ensure_newest, is_merge
from flows.report.record import HandoffRecord, Trigger
from flows.running_code import WrongCode, ensure_code
from flows.session import begin, finish
from flows.source_tree import WrongCommit, ensure_commit, source_tree
from flows.spec import load_spec
from flows.spec_paths import SpecRefused, confine, specs_dir
from flows.tasks import (
    apply_at_zero,
    approve_gates,
    approve_plan,
    bake_window,
    retire,
    roll_back,
    run_gates,
    scale_up,
    swap_selector,
    wait_for_image,
    warm_up,
)
from flows.webhook.event_signature import check_trigger
from flows.webhook.specs import find_repo_root


@flow(name="handoff", log_prints=True)
def handoff(
    spec_file: str,
    auto_approve: bool = False,
    kubeconfig: str | None = None,
    trigger: Trigger | None = None,
    queue_timeout_s: float = 6 * 3600.0,
) -> HandoffRecord:
    """plan → image → approve plan → apply at 0 → warm → gates → approve → swap →
    scale up → bake → retire. In place the old pods stop at the apply: everything a
    person decides is asked before it, and from there the gates decide (pass: swap at
    once; fail or no verdict: roll back at once) unless the spec asks for a look during
    the outage, bounded by its own short timeout. Side by side the bake keeps the old
    workload Ready while the candidate serves, and a breach of its SLOs goes back to it
    at once (in place it reports and alerts only).

    A merge's run waits up to queue_timeout_s while another run hands off the same
    Service (runs of other Services go on meanwhile), then checks again that its merge
    is still the newest: the newest merge wins, per Service.

    A run started by an event or a deployment reads its spec only from the repository's
    specs directory (flows/spec_paths.py); one started by hand reads the file named.
    A merge's run runs only from its merge commit (flows/source_tree.py), that commit's
    code with the dependencies it locks (flows/running_code.py), and the record names the
    commit, the code's root, the image and the files' digest that ran."""
    # A merge commit only the relay may name (where the worker holds its public key).
    check_trigger(spec_file, trigger.model_dump() if trigger else None)
    if is_merge(trigger) or deployment.id:
        try:
            spec_file = str(confine(spec_file, specs_dir()))
        except SpecRefused as exc:
            get_run_logger().error("%s", exc)
            raise
    spec = load_spec(Path(spec_file))  # once: every step of the run reads this one
    newest = ensure_newest(spec, trigger)
    if not newest.newest:
        return _cancelled(newest.reason)
    merge = is_merge(trigger)
    # What this run hands off is what its tree holds: a merge's run holds its merge's.
    source = source_tree(spec, Path(spec_file), find_repo_root(Path(spec_file).parent))
    if is_merge(trigger) and trigger.merge_commit:
        try:
            ensure_commit(source, trigger.merge_commit, where=f"handoff {spec.name}")
            ensure_code(Path(source.root), where=f"handoff {spec.name}")
        except (WrongCommit, WrongCode) as exc:
            get_run_logger().error("%s", exc)
            raise
    try:
        with begin(
            spec,
            kubeconfig=kubeconfig,
            queue_s=queue_timeout_s if merge else 0.0,
            on_turn=(lambda: ensure_newest(spec, trigger, or_raise=True)) if merge else None,
        ) as run:
            if run.nothing_to_do:  # a rerun of a finished handoff: only its history entry
                return finish(run, trigger, source)
            try:
                # The hold from the ledger's write ends: a cancellation since is raised here.
                signals.deliver(run.cancelled)
                pinned = wait_for_image(run)
                approve_plan(run, auto=auto_approve)
                apply_at_zero(run, pinned)
                pods = warm_up(run)
                evidence = run_gates(run, pods)
                approve_gates(run, evidence, auto=auto_approve)
                swap_selector(run)
                scale_up(run)
                bake_window(run)
                retire(run)
            except (Exception, TerminationSignal, KeyboardInterrupt, Abort) as exc:
                # Cancelled (SIGTERM from the worker, Ctrl-C, or the API), the Service is
                # restored all the same, as plain code since a cancelled run runs no tasks.
                (roll_back if isinstance(exc, Exception) else roll_back.fn)(run, exc)
                finish(run, trigger, source)
                raise
            return finish(run, trigger, source)
    except Superseded as exc:  # a newer merge came while this one waited for its turn
        return _cancelled(str(exc))


def _cancelled(message: str) -> HandoffRecord:
    """End the run Cancelled. A flow that returns a State ends in it, and its caller gets
    the state's outcome (CancelledRun raised), never the State: to a caller the flow
    returns a HandoffRecord or raises, which Prefect's annotations do not express."""
    return cast(HandoffRecord, Cancelled(message=message))
