"""The handoff's steps as Prefect tasks: timed, never cached, progress reported.

Each wrapper calls the step module that does the work; side-effecting tasks use
NO_CACHE so a rerun or a rollback always acts (a cached scale() would be skipped).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows import (
    apply,
    approve,
    bake,
    drift,
    gating,
    image,
    outage,
    retiring,
    rollback,
    scale,
    signals,
    swap,
    warm,
)
from flows.capacity import Strategy
from flows.errors import HandoffError
from flows.evidence import Evidence
from flows.image import ImageRequirement, PinnedImage
from flows.kube.write import ReplicasEdited, SelectorEdited
from flows.lease import LeaseLost
from flows.ledger import Phase
from flows.report.links import run_link
from flows.report.markdown import gate_policy_markdown, plan_markdown
from flows.report.pictures import publish_pictures
from flows.report.stepview import State, StepEvent, notify
from flows.report.timeline import StepSpan
from flows.run import HandoffRun
from flows.start import ensure_not_rolling_back

T = TypeVar("T")
# Failures that already say what was edited (or that the run may not look any more).
EXPLAINED = (drift.PersonEdited, drift.ServiceGone, SelectorEdited, ReplicasEdited, LeaseLost)
STEP_COUNT = 11


@contextmanager
def _timed(run: HandoffRun, name: str) -> Iterator[None]:
    started, wall = time.monotonic(), time.time()
    notify(StepEvent(name, "started"))
    state: State = "failed"
    try:
        yield
        state = "done"
    finally:
        run.timings[name] = round(time.monotonic() - started, 3)
        run.spans.append(StepSpan(name=name, start=wall, seconds=run.timings[name], state=state))
        notify(StepEvent(name, state, run.timings[name]))
        _progress(run)


def _progress(run: HandoffRun) -> None:
    if run.on_progress is not None:
        run.on_progress(min(100.0, 100.0 * len(run.timings) / STEP_COUNT))


def step(name: str, *, forward: bool = True) -> Callable[[Callable[..., T]], Task[..., T]]:
    """A Prefect task named `name` that times itself into run.timings. A forward step
    is held to what is left of a declared in-place downtime, and checks before and
    after itself that no person changed what the handoff works on (after the waits for
    the image, an approval or the gates, and before its own writes)."""

    def wrap(fn: Callable[..., T]) -> Task[..., T]:
        def body(run: HandoffRun, *args: Any, **kwargs: Any) -> T:
            clock = run.outage if forward else None
            with _timed(run, name), outage.bounded(clock, name):
                if forward:
                    signals.check()
                    drift.check(run)
                try:
                    result = fn(run, *args, **kwargs)
                except Exception as failure:
                    if forward:
                        _blame_edit(run, failure)
                    raise
                if forward:
                    signals.check()  # a cancellation during the step, should it be lost
                    drift.check(run)
                return result

        body.__name__ = body.__qualname__ = fn.__name__
        body.__doc__ = fn.__doc__
        return task(name=name, cache_policy=NO_CACHE)(body)

    return wrap


def _blame_edit(run: HandoffRun, failure: Exception) -> None:
    """A step that failed because a person changed what it works on (a selector edited
    while the swap waited for its routes) ends as that edit: PersonEdited names it and
    the rollback leaves it as found, where the bare failure would be rolled over it."""
    if isinstance(failure, EXPLAINED):
        return
    try:
        changes = drift.observe(run)
    except drift.ServiceGone as gone:
        raise gone from failure
    except Exception:  # a failed look keeps the step's own failure
        return
    if changes:
        raise drift.PersonEdited(run, changes, failure=failure) from failure


@step("wait-for-image")
def wait_for_image(run: HandoffRun) -> PinnedImage | None:
    """Pin the image (or reuse the pin a resumed run already applied)."""
    ensure_not_rolling_back(run.ledger)
    if run.ledger.image and run.reached(Phase.APPLIED):
        return None
    spec, log = run.spec, get_run_logger()
    requirement = ImageRequirement(
        repo=spec.resolve_image(spec.image.repository),
        tag=spec.image.tag,
        source=spec.image.source,
        requires=spec.image.requires,
        timeout_s=spec.image.timeout_s,
        poll_interval_s=spec.image.poll_interval_s,
    )

    def seen(sighting: image.Sighting) -> None:
        verdict = "accepted" if sighting.accepted else "rejected"
        log.info(
            "image %s:%s at %s: %s (%s)",
            requirement.repo,
            requirement.tag,
            sighting.digest or "(absent)",
            verdict,
            sighting.reason,
        )

    pinned = image.wait_for_image(requirement, on_seen=seen)
    run.pinned = pinned
    return pinned


@step("approve-plan")
def approve_plan(run: HandoffRun, *, auto: bool) -> None:
    """In place, everything a person decides is asked here, while the old pods still
    serve: the plan, the declared downtime and the gate policy that decides later."""
    if run.plan.strategy is not Strategy.IN_PLACE:
        return
    image = run.ledger.image or _pinned_ref(run)
    summary = (
        "The old pods keep serving until you answer. Then the Service has no ready "
        "endpoints from the old pods' stop until the swap.\n\n"
        + plan_markdown(run.plan)
        + f"\n\n**Image:** `{image}`\n\n"
        + gate_policy_markdown(run.spec)
    )
    downtime = run.plan.downtime
    brief = f"**Image:** `{image}`; in place" + (
        f", declared downtime about {downtime.estimate_s:.0f} s, at most {downtime.bound_s:.0f} s"
        if downtime
        else ""
    )
    approve.request_approval(
        run,
        what="the in-place plan",
        summary=summary,
        brief=brief,
        auto=auto,
        phase=Phase.DOWNTIME_APPROVED,
    )


def _pinned_ref(run: HandoffRun) -> str:
    pinned = run.pinned
    return pinned.ref if pinned else f"{run.spec.image.repository}:{run.spec.image.tag}"


@step("apply-at-zero")
def apply_at_zero(run: HandoffRun, pinned: PinnedImage | None) -> str:
    return apply.apply_at_zero(run, pinned)


@step("warm")
def warm_up(run: HandoffRun) -> tuple[str, ...]:
    return warm.warm(run)


@step("gates")
def run_gates(run: HandoffRun, pods: tuple[str, ...]) -> Evidence:
    try:
        return gating.run_gates(run, pods)
    finally:  # failed gates too: their pictures show why
        if run.evidence is not None:
            publish_pictures(run.spec.service, run.evidence.gates)


@step("approve")
def approve_gates(run: HandoffRun, evidence: Evidence, *, auto: bool) -> None:
    """Side by side, a person approves the evidence. In place the gates decided under
    the policy approved before the outage, unless the spec asks for a look during it:
    then the wait is bounded by approval.outage_timeout_s and expiry rolls back."""
    in_place = run.plan.strategy is Strategy.IN_PLACE
    if in_place and not run.spec.approval.during_outage:
        get_run_logger().info("in place: the gates passed under the approved policy; swapping")
        return
    timeout_s, setting = (
        (run.limit(run.spec.approval.outage_timeout_s), "approval.outage_timeout_s")
        if in_place
        else (run.spec.approval.timeout_s, "approval.timeout_s")
    )
    approve.request_approval(
        run,
        what="the handoff",
        summary=evidence.markdown() + retiring.approval_note(run),
        brief=evidence.brief(),
        auto=auto,
        phase=Phase.APPROVED,
        evidence_sha256=evidence.sha256,
        timeout_s=timeout_s,
        timeout_setting=setting,
        undecided=tuple(g.name for g in evidence.undecided),
    )


@step("swap")
def swap_selector(run: HandoffRun) -> None:
    swap.swap_selector(run)
    _end_outage(run)


def _end_outage(run: HandoffRun) -> None:
    """In place: the Endpoints hold ready pods again; the outage is measured."""
    if run.outage is not None and run.outage.running:
        measured = run.outage.end()
        run.downtime_measured_s = measured
        get_run_logger().info(
            "in place: no endpoints for %.1f s (declared about %.0f s, at most %.0f s)",
            measured,
            run.outage.estimate_s,
            run.outage.bound_s,
        )


@step("scale-up")
def scale_up(run: HandoffRun) -> None:
    """The candidate to its target. Where the target fits only once the old workloads
    are gone, they go to 0 first and the ledger still reads scaled, then retired: the
    retirement is recorded after the scale-up (a rerun before that retires again, which
    only sets the same replica counts)."""
    order = (
        (partial(scale.retire, record=False), scale.scale_up, _record_retired)
        if run.plan.decision.scale_after_retire
        else (scale.scale_up,)
    )
    for do in order:
        drift.check(run)  # the scale-up waits: look again before the next write
        do(run)


@step("bake")
def bake_window(run: HandoffRun) -> None:
    """Side by side, the old workload stays Ready, serving nothing, while the candidate
    serves: a breach of the spec's bake SLOs goes back to it at once (flows/bake.py)."""
    bake.bake(run)


@step("retire")
def retire(run: HandoffRun) -> None:
    """The old workloads to 0 (kept), unless already retired before the scale-up."""
    scale.retire(run)
    # Done only on a fresh look: the Service routes to ready pods of what it should
    # serve now (a person may have scaled the candidate while the old pods stopped).
    target = swap.target_selector(run)
    swap.verify_service(run, swap.live_only_selector(run, target) if run.twin else target)
    run.advance(Phase.DONE)


def _record_retired(run: HandoffRun) -> None:
    run.advance(Phase.RETIRED)


@step("rollback", forward=False)  # the way out of the outage is never cut short
def roll_back(run: HandoffRun, cause: BaseException) -> None:
    """Restore from the ledger, leaving what a person edited as it is. With the Service
    gone there is no ledger to follow: the Deployments are put back from the run's own
    copy, and the run stops with ServiceGone."""
    text = str(cause) if isinstance(cause, HandoffError) else f"{type(cause).__name__}: {cause}"
    log = get_run_logger()
    if isinstance(cause, LeaseLost):
        log.error("not rolling back, this run may no longer write: %s", text)
        return
    log.warning("rolling back: %s", text)
    leave = cause.objects if isinstance(cause, drift.PersonEdited) else []
    if isinstance(cause, SelectorEdited):  # met at the write itself: left as it is
        leave = [f"Service {run.spec.service}"]
    if isinstance(cause, ReplicasEdited):  # likewise, a count a person set
        leave = [cause.object]
    try:
        ledger = rollback.rollback(
            run.kube,
            run.spec,
            cause=text,
            leave=leave,
            drains=run.drains,
            handoff_id=run.ledger.handoff_id,
        )
    except drift.ServiceGone as exc:
        gone = (
            cause
            if isinstance(cause, drift.ServiceGone)
            else drift.service_gone(run, "was deleted")
        )
        for problem in rollback.restore_workloads(run.kube, run.spec, run.ledger, leave):
            log.error("restoring the Deployments without the Service: %s", problem)
        raise gone from exc
    if ledger is not None and ledger.handoff_id == run.ledger.handoff_id:
        run.ledger = ledger
    _end_outage(run)
    _tell_rollback(run, text)


def _tell_rollback(run: HandoffRun, cause: str) -> None:
    if run.notifier is None:
        return
    from prefect.runtime import flow_run

    evidence = run.evidence
    ended = (
        "rolled back"
        if run.ledger.phase == Phase.ROLLED_BACK
        else f"did not finish its rollback ({run.ledger.phase}): look at it now"
    )
    run.notifier.send(
        "rollback",
        f"handoff {run.spec.name} {ended}",
        f"Handoff `{run.ledger.handoff_id}` of Service `{run.spec.namespace}/"
        f"{run.spec.service}` rolled back ({run.ledger.phase}): {cause}"
        + (f"\n\n{evidence.brief()}" if evidence else "")
        + f"\n\nReport: {run_link(str(flow_run.id))}",
    )


def spec_path(value: str | Path) -> Path:
    return Path(value).expanduser().resolve()
