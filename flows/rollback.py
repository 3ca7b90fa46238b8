"""Roll back: restore the Service and its workloads from the ledger's snapshot.

Works from what is recorded on the cluster only, so it runs after a crash as well
as after a failed step (`handoff rollback SPEC`). Order keeps clients served where
it can: the old workloads come back and are Ready first, then the selector goes
back, then the candidate goes to its previous replica count (0 if it is new; it
is kept, not deleted). In place, the previous Deployment spec is put back whole.
Each write checks the cluster first, so a second rollback changes nothing; an edit a
person makes while it runs is left as they made it: a live count this handoff cannot
have set is not restored over, and a candidate the Service routes to again (a person
pointed it back) is not stopped. A part
that fails (a 403, an outage, a timeout) is named in the recorded cause and the
other parts still run: the ledger always ends rolled back.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from flows.drain import Drained, drain
from flows.drift import ServiceGone
from flows.errors import HandoffError, PermanentError
from flows.kube import read, write
from flows.kube.client import Kube, NotFound
from flows.kube.objects import (
    DeploymentSnapshot,
    PodSnapshot,
    current_template_hash,
    owned_by_deployment,
)
from flows.kube.wait import WaitTimedOut, wait_pods, wait_rolled_out
from flows.kube.write import SelectorEdited
from flows.lease import LeaseLost, ServiceLease
from flows.ledger import REVISION_LABEL, TERMINAL, Ledger, Phase, WorkloadSnapshot
from flows.ledger_store import read_ledger, save_ledger
from flows.render import (
    HANDOFF_ID_ANNOTATION,
    WORKLOAD_LABEL,
    candidate_name,
    compute_startup_allowance,
    is_twin,
)
from flows.report.record import announce
from flows.spec import HandoffSpec
from flows.swap import settle_data_plane

RESTORE_S = 300.0  # the candidate's pods stopping
RESTORE_MARGIN_S = 60.0  # beyond a restored workload's startup allowance
READY_AFTER_RESTORE_S = 60.0  # a restored pod's readiness after its rollout wait


def rollback_by_hand(kube: Kube, spec: HandoffSpec, *, cause: str) -> Ledger | None:
    """`handoff rollback`: under the Service's Lease, like a handoff, so it never writes
    while a live handoff does (HandoffInProgress names that run) and its own writes stop
    if it loses the Lease."""
    holder = f"rollback-{uuid.uuid4().hex[:12]}"
    with ServiceLease(kube, spec.namespace, spec.service, holder) as lease:
        return rollback(dataclasses.replace(kube, fence=lease.check), spec, cause=cause)


def rollback(
    kube: Kube,
    spec: HandoffSpec,
    *,
    cause: str,
    leave: Sequence[str] = (),
    drains: list[Drained] | None = None,
    handoff_id: str | None = None,
) -> Ledger | None:
    """Restore the pre-handoff state; returns the final ledger, or None if none was found.
    The objects in `leave` (`Deployment NAME`, `Service NAME`: a person edited them
    during the handoff) are recorded in the ledger and left as they are. The candidate's
    drain, once the Service has left it, is appended to `drains`."""
    try:
        ledger = read_ledger(kube, spec)
    except NotFound as exc:
        raise ServiceGone(
            f"Service {spec.namespace}/{spec.service} no longer exists: there is no ledger "
            "to roll back from, and the Service is not recreated"
        ) from exc
    if ledger is None or ledger.phase in TERMINAL:
        return ledger
    if handoff_id is not None and ledger.handoff_id != handoff_id:
        return None  # another run holds the Service now: its ledger is not this run's to undo
    if not ledger.first_write_made:
        # Only the ledger was written: the Service and the workloads are as observed,
        # so nothing is restored and the end is one write.
        stopped = ledger.to(Phase.ROLLING_BACK).to(
            Phase.ROLLED_BACK,
            cause=f"{ledger.cause or cause}; stopped before its first write: nothing to undo"[
                :2000
            ],
        )
        return save_ledger(kube, spec, stopped)
    if ledger.phase is Phase.ROLLING_BACK:
        cause = ledger.cause or cause  # a rollback resumed keeps the cause it began with
        if not set(leave) <= set(ledger.edited):  # met since it began (a bake's move back)
            ledger = _left(kube, spec, ledger, leave)
        ledger = _adopt_unrecorded_pin(kube, spec, ledger)
    else:
        edited = sorted({*ledger.edited, *leave})
        ledger = save_ledger(
            kube, spec, ledger.to(Phase.ROLLING_BACK, cause=cause[:2000], edited=edited)
        )
    problems: list[str] = []
    kept = set(ledger.edited)
    candidate = f"Deployment {candidate_name(spec, ledger.strategy)}"
    if ledger.strategy == "in-place" and not spec.replaces_live and candidate not in kept:
        # The candidate holds the GPUs the old pods need back: it goes first, or the
        # old pods would wait Unschedulable while the Service has no endpoints.
        with _noted(problems):
            _undo_candidate(kube, spec, ledger)
            _wait_candidate_stopped(kube, spec, ledger)
    elif candidate not in kept:
        # Side by side after the old pods were retired: the candidate keeps serving at
        # its preview size and frees the GPUs the old pods need to come back.
        with _noted(problems):
            _candidate_to_preview(kube, spec, ledger)
    if f"Service {spec.service}" not in kept:
        ledger = _back_through_twin(kube, spec, ledger, problems, drains)
        kept = set(ledger.edited)
    for workload in ledger.snapshot.workloads:
        if f"Deployment {workload.name}" in kept:
            continue
        with _noted(problems):
            _restore_workload(kube, spec, ledger, workload, problems)
    if f"Service {spec.service}" in kept:
        # A person chose the selector: it stays, and so do the pods it routes to.
        with _noted(problems):
            if candidate not in kept and not _routes_to_candidate(kube, spec, ledger):
                _undo_candidate(kube, spec, ledger)
    elif candidate in kept:
        # The kept candidate's pods may match the snapshot selector: then the Service
        # stays pinned to the live pods (never two versions at once), and the cause says
        # how to lift the pin, which nothing here will do once the rollback has ended.
        with _noted(problems):
            pinned = _pinned_to_restored(kube, spec, ledger, problems)
            target = pinned or ledger.snapshot.selector
            ledger, moved = _move_or_leave(kube, spec, ledger, target, problems)
            if pinned and moved:
                problems.append(_pin_left(spec, candidate, pinned))
    else:
        ledger = _restore_selector_then_candidate(kube, spec, ledger, problems, drains)
    with _noted(problems):
        announce(
            kube,
            spec,
            reason="HandoffRolledBack",
            message=f"handoff {ledger.handoff_id} rolled back: {cause}"[:1000],
            warning=True,
        )
    note = f"{cause}; rollback problems: {'; '.join(problems)}" if problems else cause
    ledger = _as_recorded(kube, spec, ledger)  # with what its parts recorded, even failing
    kept = set(ledger.edited)
    if kept:
        note += f"; left as edited: {', '.join(sorted(kept))}"
    return save_ledger(kube, spec, ledger.to(Phase.ROLLED_BACK, cause=note[:2000]))


def restore_workloads(
    kube: Kube, spec: HandoffSpec, ledger: Ledger, leave: Sequence[str]
) -> list[str]:
    """With the Service (and its ledger) gone, the Deployments from the run's own copy
    of the ledger: the candidate back to its count, the live ones restored; problems."""
    problems: list[str] = []
    kept = {*ledger.edited, *leave}
    if f"Deployment {candidate_name(spec, ledger.strategy)}" not in kept:
        with _noted(problems):
            _undo_candidate(kube, spec, ledger)
    for workload in ledger.snapshot.workloads:
        if f"Deployment {workload.name}" not in kept:
            with _noted(problems):
                _restore_workload(kube, spec, ledger, workload, problems)
    return problems


def _pin_left(spec: HandoffSpec, candidate: str, pinned: dict[str, str]) -> str:
    where = f"-n {spec.namespace} service {spec.service}"
    return (
        f"the Service stays pinned to {pinned} (the live pods) while pods of the kept "
        f"{candidate} match its selector; once they are gone or relabelled, and before any "
        f"rollout of the live Deployment (which would leave it selecting no pod), lift "
        f"the pin: `kubectl patch {where} --type=json -p "
        """'[{"op":"remove","path":"/spec/selector/pod-template-hash"}]'`"""
    )


def _routes_to_candidate(kube: Kube, spec: HandoffSpec, ledger: Ledger) -> bool:
    """The Service selects pods of the candidate: a twin's, or a separate Deployment's
    (never so when the candidate is the live Deployment replaced in place: its pods are
    the restored ones)."""
    if spec.replaces_live and not is_twin(spec, ledger.strategy):
        return False
    return _selects_pods_of(kube, spec, candidate_name(spec, ledger.strategy))


def _restore_selector_then_candidate(
    kube: Kube,
    spec: HandoffSpec,
    ledger: Ledger,
    problems: list[str],
    drains: list[Drained] | None = None,
) -> Ledger:
    """One block: the candidate is stopped only once the Service has left it. Returns
    the ledger as last written (a pin it recorded)."""
    with _noted(problems):
        # While candidate pods that the original selector would match still run, the
        # Service is held on the restored pods alone (never two versions at once).
        pinned = _pinned_to_restored(kube, spec, ledger, problems)
        target = pinned or ledger.snapshot.selector
        ledger, moved = _move_or_leave(kube, spec, ledger, target, problems)
        if not moved and _routes_to_candidate(kube, spec, ledger):
            return ledger  # the selector a person set routes to it: it keeps serving
        settle_data_plane()  # the proxies leave the candidate before it stops
        # Its generations end before it stops (flows/drain.py); in place with the live
        # Deployment replaced there is no candidate of its own to stop.
        if not spec.replaces_live or is_twin(spec, ledger.strategy):
            found = drain(
                kube,
                spec.namespace,
                spec.service,
                candidate_name(spec, ledger.strategy),
                port=spec.candidate.port,
                connections=spec.retire.drain_connections,
            )
            if found is not None and drains is not None:
                drains.append(found)
        if _routes_to_candidate(kube, spec, ledger):
            # The Service was moved off it above: a person has pointed it back since.
            problems.append(
                f"Service {spec.service} routes to the pods of "
                f"{candidate_name(spec, ledger.strategy)} again, by a selector set since the "
                "rollback moved it off them: the candidate was left at its count"
            )
            return ledger
        _undo_candidate(kube, spec, ledger)
        if pinned and moved:
            _wait_candidate_gone(kube, spec, ledger)
            ledger, _ = _move_or_leave(kube, spec, ledger, ledger.snapshot.selector, problems)
    return ledger


def _move_or_leave(
    kube: Kube,
    spec: HandoffSpec,
    ledger: Ledger,
    target: dict[str, str],
    problems: list[str],
    *,
    owners: Sequence[str] | None = None,
) -> tuple[Ledger, bool]:
    """_move_selector, where a selector a person set since the rollback began
    (SelectorEdited) stays as if met before: recorded as edited, its words noted.
    Returns the ledger as last written and whether the Service was moved."""
    try:
        return _move_selector(kube, spec, ledger, target, owners=owners), True
    except SelectorEdited as exc:
        problems.append(str(exc))
        current = _as_recorded(kube, spec, ledger)
        return _left(kube, spec, current, [f"Service {spec.service}"]), False


def _as_recorded(kube: Kube, spec: HandoffSpec, ledger: Ledger) -> Ledger:
    """This rollback's ledger as the Service holds it now: with a pin or an edit a part
    recorded before it failed (the caller's copy predates them)."""
    found = read_ledger(kube, spec)
    if found is None or found.handoff_id != ledger.handoff_id:
        return ledger
    return found if found.phase is Phase.ROLLING_BACK else ledger


def _adopt_unrecorded_pin(kube: Kube, spec: HandoffSpec, ledger: Ledger) -> Ledger:
    """A rollback begun by a version that kept no `rollback_pins` (its ledger lacks the
    key) may have left the Service on a pin it wrote: a selector of a pin's shape found
    now is taken as that rollback's and recorded, as that version took any such pin."""
    if "rollback_pins" in ledger.model_fields_set:
        return ledger
    selector = read.read_service(kube, spec.namespace, spec.service).selector
    hash_ = selector.get("pod-template-hash")
    if hash_ is None or selector != {**ledger.snapshot.selector, "pod-template-hash": hash_}:
        return ledger
    if _written_by(ledger, selector):
        return ledger
    return save_ledger(kube, spec, ledger.model_copy(update={"rollback_pins": [selector]}))


def _left(kube: Kube, spec: HandoffSpec, ledger: Ledger, objects: Sequence[str]) -> Ledger:
    """Record objects a person changed, which the rollback leaves as they are."""
    edited = sorted({*ledger.edited, *objects})
    return save_ledger(kube, spec, ledger.model_copy(update={"edited": edited}))


@contextmanager
def _noted(problems: list[str]) -> Iterator[None]:
    """A part of the rollback that fails (a 403, an outage, a timeout) is noted in the
    ledger's cause and the other parts still run, so the ledger never stays in
    rolling-back; only a lost Lease stops it (this run may not write any more)."""
    try:
        yield
    except (LeaseLost, RestoreNotReady):
        raise
    except HandoffError as exc:
        problems.append(str(exc))


class RestoreNotReady(PermanentError):
    """What the Service should go back to has no Ready pod: it stays on what serves."""


def _move_selector(
    kube: Kube,
    spec: HandoffSpec,
    ledger: Ledger,
    target: dict[str, str],
    *,
    owners: Sequence[str] | None = None,
) -> Ledger:
    """Point the Service back at `target` once a pod it matches is Ready, reading only
    until then, as the forward swap does: while the Service routes to ready pods, it is
    never moved to pods none of which serves. A Service that routes to none (in place, or
    a candidate that stopped) is moved at once, as that cannot make it worse, and the
    rollback still waits for a Ready pod when something served before the handoff. Never
    over a selector this handoff neither found nor wrote (SelectorEdited: a person's).
    RestoreNotReady when none is Ready in time: the ledger stays in rolling-back. A pin
    (the selector narrowed to the restored pods) is recorded in the ledger before it is
    written, so that a later step, or a rerun, knows it from a person's of the same shape.
    `owners`: the Deployments whose Ready pods count (default: the restored ones).
    Returns the ledger as last written."""
    serving = bool(read.read_endpoints(kube, spec.namespace, spec.service).ready_pods)
    if serving:
        _wait_restored_ready(kube, spec, ledger, target, moved=False, owners=owners)
    if not _written_by(ledger, target):
        pins = [*ledger.rollback_pins, target]
        ledger = save_ledger(kube, spec, ledger.model_copy(update={"rollback_pins": pins}))
    write.update_service_selector(
        kube,
        spec.namespace,
        spec.service,
        target,
        expected=lambda found: _written_by(ledger, found),
    )
    if not serving and ledger.snapshot.serving:
        # Nothing served a moment ago: `rolled-back` only once the restored pods do.
        _wait_restored_ready(kube, spec, ledger, target, moved=True, owners=owners)
    return ledger


class _NothingToWaitFor(Exception):
    """No workload is left whose pods could become Ready."""


def _wait_restored_ready(
    kube: Kube,
    spec: HandoffSpec,
    ledger: Ledger,
    target: dict[str, str],
    *,
    moved: bool,
    owners: Sequence[str] | None = None,
) -> None:
    """A Ready pod matching `target` of a restored workload (or of `owners`) that still
    exists (a deleted Deployment's pods stay Ready for a moment before the garbage
    collector removes them), within READY_AFTER_RESTORE_S; RestoreNotReady otherwise."""
    names = owners if owners is not None else [w.name for w in ledger.snapshot.workloads]
    live = [n for n in names if read.read_deployment(kube, spec.namespace, n) is not None]

    def decide(pods: list[PodSnapshot]) -> bool | None:
        serving = [
            p
            for p in pods
            if p.ready and not p.terminating and any(owned_by_deployment(p, n) for n in live)
        ]
        return True if serving else None

    try:
        if not live:  # nothing left that could become Ready: waiting would only cost time
            raise _NothingToWaitFor(f"no Deployment of {', '.join(names)} exists any more")
        wait_pods(
            kube,
            spec.namespace,
            target,
            decide=decide,
            deadline_s=READY_AFTER_RESTORE_S,
            what=f"a Ready pod matching {target} to move Service {spec.service} back to",
        )
    except (WaitTimedOut, _NothingToWaitFor) as exc:
        where = (
            f"selects {target}, but no pod it matches became Ready ({exc}): it has no "
            "ready endpoint"
            if moved
            else f"was not moved back to {target}: no pod it matches became Ready ({exc}). "
            "It stays on the pods that serve now"
        )
        todo = (
            "Create the live workload again (`kubectl apply` its manifest)"
            if isinstance(exc, _NothingToWaitFor)
            else f"Make the restored workload ready (`kubectl -n {spec.namespace} describe "
            f"pods -l {','.join(f'{k}={v}' for k, v in target.items())}`)"
        )
        raise RestoreNotReady(
            f"handoff {ledger.handoff_id}: the Service {spec.namespace}/{spec.service} "
            f"{where}, and the handoff stays rolling-back. {todo}, then run `handoff "
            "rollback` (or the handoff) again to finish"
        ) from exc


def _written_by(ledger: Ledger, selector: dict[str, str]) -> bool:
    """The selector is one this handoff found or wrote: the one before it, its pin to
    the live pods (the plan's, or one a rollback recorded before writing it), or one of
    the candidate's (they all name its revision). A pin of the same shape that it did
    not record is a person's."""
    return selector in (ledger.snapshot.selector, ledger.pin, *ledger.rollback_pins) or (
        ledger.revision is not None and selector.get(REVISION_LABEL) == ledger.revision
    )


def _candidate_to_preview(kube: Kube, spec: HandoffSpec, ledger: Ledger) -> None:
    """Scale a side-by-side candidate above its preview size back to it, while a live
    workload is below its recorded count (retired): the restore needs the GPUs."""
    if spec.replaces_live or ledger.strategy != "side-by-side":
        return
    retired = False
    for workload in ledger.snapshot.workloads:
        found = read.read_deployment(kube, spec.namespace, workload.name)
        retired = retired or (found is not None and found.replicas < workload.replicas)
    name = candidate_name(spec, ledger.strategy)
    candidate = read.read_deployment(kube, spec.namespace, name)
    preview = max(spec.candidate.preview_replicas, ledger.snapshot.candidate_replicas)
    if retired and candidate is not None and candidate.replicas > preview:
        write.scale_deployment(kube, spec.namespace, name, preview, expected={candidate.replicas})


def _rewritten(ledger: Ledger, workload: WorkloadSnapshot, found: DeploymentSnapshot) -> bool:
    """This handoff wrote the live Deployment's spec (in place at the apply, through a
    twin at the retirement): it carries the handoff's mark, its template the handoff's
    revision and pinned image, and no longer the recorded spec. A spec changed otherwise
    (or changed again since: `kubectl set image`) is a person's, and is not put back."""
    template = found.spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    return (
        workload.spec is not None
        and found.spec != workload.spec
        and found.annotations.get(HANDOFF_ID_ANNOTATION) == ledger.handoff_id
        and labels.get(REVISION_LABEL) == ledger.revision
        and (ledger.image is None or ledger.image in found.images.values())
    )


def _back_through_twin(
    kube: Kube,
    spec: HandoffSpec,
    ledger: Ledger,
    problems: list[str],
    drains: list[Drained] | None,
) -> Ledger:
    """Through a twin, once the live Deployment took the candidate's spec and its pods
    serve: before that spec is put back (a Recreate strategy, one pod holding the GPUs,
    stops the only pods that serve), the Service moves to a twin in one write and the
    live pods are drained. The twin is the candidate's own while it still runs (the same
    version, so no client sees another), else the recorded spec, the version to go back
    to, made the twin at the preview size. The usual restore then puts the live spec
    back, moves the Service to the restored pods and removes the twin, as the forward
    retirement does. A twin that does not become ready, or any failure here, stops the
    rollback with RestoreNotReady while the live pods still serve: it stays
    rolling-back, to be run again. A selector a person set is left, and so is a live
    Deployment it routes to. Returns the ledger as last written."""
    ns = spec.namespace
    if not is_twin(spec, ledger.strategy) or len(ledger.snapshot.workloads) != 1:
        return ledger
    [workload] = ledger.snapshot.workloads
    name = candidate_name(spec, ledger.strategy)
    if {f"Deployment {workload.name}", f"Deployment {name}"} & set(ledger.edited):
        return ledger  # a person changed one of them: theirs to decide, left as they are
    live = read.read_deployment(kube, ns, workload.name)
    if live is None or workload.spec is None or not _rewritten(ledger, workload, live):
        return ledger
    try:
        twin = _serving_twin(kube, spec, ledger, workload.spec, name)
        target = {**twin.selector, WORKLOAD_LABEL: name}
        ledger, moved = _move_or_leave(kube, spec, ledger, target, problems, owners=[name])
    except HandoffError as exc:
        raise RestoreNotReady(
            f"handoff {ledger.handoff_id}: Deployment {ns}/{workload.name} runs the "
            f"candidate's spec and its pods serve; its recorded spec is put back only once "
            f"the Service has moved to a twin ({name}), and that failed: {exc}. The Service "
            "stays on the pods that serve and the handoff stays rolling-back: make room for "
            f"the twin (`kubectl -n {ns} describe deployment {name}`), then run `handoff "
            "rollback` (or the handoff) again"
        ) from exc
    if not moved:
        if _selects_pods_of(kube, spec, workload.name):  # a person's selector routes there
            ledger = _left(kube, spec, ledger, [f"Deployment {workload.name}"])
        return ledger
    with _noted(problems):
        settle_data_plane()  # the proxies leave the live pods before they are replaced
        found = drain(
            kube,
            ns,
            spec.service,
            workload.name,
            port=spec.candidate.port,
            connections=spec.retire.drain_connections,
        )
        if found is not None and drains is not None:
            drains.append(found)
    return ledger


def _serving_twin(
    kube: Kube, spec: HandoffSpec, ledger: Ledger, recorded: dict[str, Any], name: str
) -> DeploymentSnapshot:
    """This handoff's twin, Ready: the one that runs (the candidate's, or the previous
    version's an earlier try made), else the previous version made the twin. A
    Deployment of that name this handoff did not make is refused (WorkloadReplaced)."""
    ns = spec.namespace
    twin = read.read_deployment(kube, ns, name)
    if twin is not None and twin.annotations.get(HANDOFF_ID_ANNOTATION) != ledger.handoff_id:
        raise write.WorkloadReplaced(
            f"Deployment {ns}/{name} is not this handoff's (annotation "
            f"{HANDOFF_ID_ANNOTATION}={twin.annotations.get(HANDOFF_ID_ANNOTATION)!r})"
        )
    if twin is None:
        write.apply_deployment(kube, _previous_as_twin(spec, ledger, recorded, name))
    wait_rolled_out(kube, ns, name, deadline_s=restore_s(recorded))
    found = read.read_deployment(kube, ns, name)
    if found is None:
        raise write.WorkloadReplaced(f"Deployment {ns}/{name} was deleted meanwhile")
    return found


def _selects_pods_of(kube: Kube, spec: HandoffSpec, deployment: str) -> bool:
    """The Service's selector routes to pods of `deployment`."""
    selector = read.read_service(kube, spec.namespace, spec.service).selector
    return bool(selector) and any(
        owned_by_deployment(p, deployment) for p in read.list_pods(kube, spec.namespace, selector)
    )


def _previous_as_twin(
    spec: HandoffSpec, ledger: Ledger, recorded: dict[str, Any], twin: str
) -> dict[str, Any]:
    """The live Deployment's recorded spec as the twin: its own name and workload label
    (so its pods are told from the live Deployment's), the preview size, this handoff's
    mark (so only this handoff deletes it)."""
    body = copy.deepcopy(recorded)
    body["replicas"] = spec.candidate.preview_replicas
    body["selector"].setdefault("matchLabels", {})[WORKLOAD_LABEL] = twin
    body["template"]["metadata"].setdefault("labels", {})[WORKLOAD_LABEL] = twin
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": twin,
            "namespace": spec.namespace,
            "annotations": {HANDOFF_ID_ANNOTATION: ledger.handoff_id},
        },
        "spec": body,
    }


def _restore_workload(
    kube: Kube,
    spec: HandoffSpec,
    ledger: Ledger,
    workload: WorkloadSnapshot,
    problems: list[str],
) -> None:
    current = read.read_deployment(kube, spec.namespace, workload.name)
    if current is None:
        problems.append(f"Deployment {workload.name} no longer exists")
        return
    if workload.spec is not None and current.spec != workload.spec:
        if not _rewritten(ledger, workload, current):
            problems.append(
                f"Deployment {spec.namespace}/{workload.name}'s spec differs from the one "
                f"handoff {ledger.handoff_id} recorded, and this handoff did not write it "
                f"(annotation {HANDOFF_ID_ANNOTATION}="
                f"{current.annotations.get(HANDOFF_ID_ANNOTATION)!r}): a person's change, left "
                "as it is"
            )
            return
        write.replace_deployment_spec(
            kube, spec.namespace, workload.name, workload.spec, generation=current.generation
        )
    elif current.replicas != workload.replicas:
        write.scale_deployment(
            kube,
            spec.namespace,
            workload.name,
            workload.replicas,
            expected=restorable_from(workload),
        )
    try:
        # The allowance of the spec it now rolls out: the recorded one, where put back.
        rolling = workload.spec if workload.spec is not None else current
        wait_rolled_out(kube, spec.namespace, workload.name, deadline_s=restore_s(rolling))
    except HandoffError as exc:
        problems.append(str(exc))


def restorable_from(workload: WorkloadSnapshot) -> set[int]:
    """The counts a restore scales a live workload back from: those this handoff can have
    left it at (its recorded one, or 0 once retired or replaced). Any other is a person's,
    made since: ReplicasEdited, noted in the cause, and the count is left as they set it."""
    return {workload.replicas, 0}


def restore_s(deployment: DeploymentSnapshot | dict[str, Any]) -> float:
    """How long a restored workload (or one of this spec) may take to roll out: its own
    startup allowance (the longest startupProbe budget of its containers, else the
    default) plus a margin for scheduling and pulls."""
    body = deployment.spec if isinstance(deployment, DeploymentSnapshot) else deployment
    containers = body["template"]["spec"]["containers"]
    allowance = max(compute_startup_allowance({"spec": body}, c["name"]) for c in containers)
    return allowance + RESTORE_MARGIN_S


def _pinned_to_restored(
    kube: Kube, spec: HandoffSpec, ledger: Ledger, problems: list[str]
) -> dict[str, str] | None:
    """While a pod of the candidate, not the live Deployment itself, matches the snapshot
    selector: that selector narrowed to the live Deployment's template as it is now, so
    the Service never selects both; else None. The ledger's pin (taken at plan time) only
    when that cannot be read: a person may have rolled the live Deployment since, and its
    old hash then selects no pod. With neither, the problem is noted."""
    name = candidate_name(spec, ledger.strategy)
    if name in {w.name for w in ledger.snapshot.workloads}:
        return None
    pods = read.list_pods(kube, spec.namespace, ledger.snapshot.selector)
    if not any(owned_by_deployment(p, name) for p in pods):
        return None
    pin = _live_pin(kube, spec, ledger) or ledger.pin
    if pin is None:
        problems.append(
            f"pods of {name} match Service {spec.service}'s selector "
            f"{ledger.snapshot.selector} and the live Deployment has no one pod-template-hash "
            "to narrow it to: the Service may select both versions until they are gone"
        )
    return pin


def _live_pin(kube: Kube, spec: HandoffSpec, ledger: Ledger) -> dict[str, str] | None:
    """The snapshot selector narrowed to the live Deployment's current ReplicaSet, read
    now (after its restore, or as a person left it), as the plan narrows it. Taken from
    the ReplicaSet, not the pods: they may not be there yet, or be of two templates."""
    if len(ledger.snapshot.workloads) != 1:
        return None
    live = read.read_deployment(kube, spec.namespace, ledger.snapshot.workloads[0].name)
    if live is None:
        return None
    found = current_template_hash(live, read.list_replica_sets(kube, spec.namespace))
    return None if found is None else {**ledger.snapshot.selector, "pod-template-hash": found}


def _wait_candidate_gone(kube: Kube, spec: HandoffSpec, ledger: Ledger) -> None:
    name = candidate_name(spec, ledger.strategy)
    wait_pods(
        kube,
        spec.namespace,
        ledger.snapshot.selector,
        decide=lambda pods: None if any(owned_by_deployment(p, name) for p in pods) else True,
        deadline_s=RESTORE_S,
        what=f"the pods of {name} to stop",
    )


def _wait_candidate_stopped(kube: Kube, spec: HandoffSpec, ledger: Ledger) -> None:
    name = candidate_name(spec, ledger.strategy)
    candidate = read.read_deployment(kube, spec.namespace, name)
    if candidate is None or ledger.snapshot.candidate_replicas:
        return
    wait_pods(
        kube,
        spec.namespace,
        candidate.selector,
        decide=lambda pods: None if any(owned_by_deployment(p, name) for p in pods) else True,
        deadline_s=RESTORE_S,
        what=f"the pods of {name} to stop and release their GPUs",
    )


def _undo_candidate(kube: Kube, spec: HandoffSpec, ledger: Ledger) -> None:
    """A twin is removed; a separate candidate goes back to its replica count (kept)."""
    name = candidate_name(spec, ledger.strategy)
    if is_twin(spec, ledger.strategy):
        write.delete_deployment(
            kube, spec.namespace, name, marked=(HANDOFF_ID_ANNOTATION, ledger.handoff_id)
        )
        return
    if spec.replaces_live:
        return  # the live Deployment itself was restored above
    candidate = read.read_deployment(kube, spec.namespace, name)
    if candidate is not None and candidate.replicas != ledger.snapshot.candidate_replicas:
        write.scale_deployment(
            kube,
            spec.namespace,
            name,
            ledger.snapshot.candidate_replicas,
            expected={candidate.replicas},
        )


def back_to_warm(kube: Kube, spec: HandoffSpec, ledger: Ledger, *, cause: str) -> Ledger:
    """A bake's breach: the rollback begins (recorded first, so a crash or a rerun
    finishes it) and the Service goes back at once to the old pods, still Ready at their
    size: no cold start. `rollback()` then does the rest as usual, keeping this cause."""
    ledger = save_ledger(kube, spec, ledger.to(Phase.ROLLING_BACK, cause=cause[:2000]))
    problems: list[str] = []
    pinned = _pinned_to_restored(kube, spec, ledger, problems)
    return _move_selector(kube, spec, ledger, pinned or ledger.snapshot.selector)


def stop_breached(kube: Kube, spec: HandoffSpec, ledger: Ledger) -> None:
    """Once the proxies have left a candidate that breached its bake, stop it: clients
    keep their kept-alive connections to it (conntrack) and meet its failures until its
    server, told to stop, closes each after its next answer. Its generations in flight
    end within its own grace period; its idle connections are not waited for."""
    settle_data_plane()
    _undo_candidate(kube, spec, ledger)
