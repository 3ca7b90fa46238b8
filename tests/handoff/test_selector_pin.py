"""The live selector is pinned to the pod-template-hash of the live Deployment's current
ReplicaSet (before a candidate whose pods it would match is applied) from a fresh read of
the Service under its resourceVersion, as the swap is: a change made to the Service after
the plan is neither merged into the pin nor kept beside it, and the pinned Service
selects exactly the live pods' template. A resumed run keeps the pin its ledger
recorded; a live Deployment whose controller has not caught up is not pinned. A rollback
holds the Service on the live Deployment's current hash, read then (the recorded pin if it
cannot be), until the candidate's pods are gone."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from flows import drift
from flows.apply import apply_at_zero
from flows.kube.client import Kube
from flows.kube.wait import wait_rolled_out
from flows.kube.write import SelectorEdited
from flows.ledger import ANNOTATION, Phase, parse_ledger
from flows.plan import PlanRefused, make_plan
from flows.render import TWIN_SUFFIX
from flows.rollback import rollback
from flows.start import start_or_resume
from flows.warm import wait_candidate_ready
from sandbox.state import SandboxState
from tests.conftest import set_cordoned
from tests.kubelet.waits import is_ready
from tests.world import load_spec_as_run, service, spec_in


@pytest.mark.invariants(
    reason="a person's selector edit selects no pod until the pin",
    allow=("I1",),
    services=("coder-predictor",),
)
@pytest.mark.invariants(
    reason="a person's selector that selects no pod is left as the person set it",
    allow=("I1", "I3"),
    services=("coder-predictor",),
)
def test_a_pin_is_never_written_over_a_selector_a_person_set_after_the_plan(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
    plan = make_plan(kube, spec)
    assert plan.pin_live_selector, "the twin's pods match the live selector: it must be pinned"
    run = start_or_resume(kube, spec, plan, run_id="pin-test")
    # Someone edits the Service between the plan and the pin: the pin was decided from
    # another selector, so it is not written over the person's (I5).
    kube.core.patch_namespaced_service(
        "coder-predictor", seeded, {"spec": {"selector": {"tier": "serving"}}}
    )
    edited = service(kube, seeded, "coder-predictor").spec.selector
    with pytest.raises(SelectorEdited, match="someone else changed it"):
        apply_at_zero(run, None)
    assert service(kube, seeded, "coder-predictor").spec.selector == edited
    applied = kube.apps.list_namespaced_deployment(seeded).items
    assert not [d for d in applied if d.metadata.name.endswith(TWIN_SUFFIX)], "applied anyway"


def _wait_live_pods_gone(kube: Kube, namespace: str) -> None:
    deadline = time.monotonic() + 60
    while kube.core.list_namespaced_pod(namespace, label_selector="app=candle-vllm").items:
        assert time.monotonic() < deadline, "the live pods did not go within 60 s"
        time.sleep(0.5)


@pytest.mark.slow  # three pin tests run by default
@pytest.mark.invariants(
    reason="the test scales the live Deployment to 0, as a rollback leaves it",
    allow=("I1", "I3"),
    services=("coder-predictor",),
)
def test_the_pin_is_the_live_replica_sets_hash_while_its_pods_are_not_there(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # As a rerun right after a rollback finds it: the live Deployment is back, its
    # ReplicaSet is there, its pods are not yet. The hash comes from that ReplicaSet.
    kube.apps.patch_namespaced_deployment_scale("candle-vllm", seeded, {"spec": {"replicas": 0}})
    _wait_live_pods_gone(kube, seeded)
    spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
    plan = make_plan(kube, spec)
    assert plan.pin_live_selector == {
        "app": "candle-vllm",
        "pod-template-hash": _current_hash(kube, seeded),
    }


def _template_changed(kube: Kube, namespace: str, deployment: str, **spec: object) -> None:
    """A new pod template for the Deployment: a new ReplicaSet, a new pod-template-hash."""
    template = {"metadata": {"annotations": {"touched": str(time.time())}}}
    kube.apps.patch_namespaced_deployment(
        deployment, namespace, {"spec": {"template": template, **spec}}
    )


@pytest.mark.invariants(
    reason="the test scales the live Deployment to 0, as an in-place apply does",
    allow=("I1", "I3"),
    services=("coder-predictor",),
)
def test_a_resumed_run_keeps_the_pin_its_ledger_recorded(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # In place, the candidate is applied onto the live Deployment after the pin: a run
    # resumed from there finds the candidate's ReplicaSet current and must not pin to it.
    spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
    first = make_plan(kube, spec)
    start_or_resume(kube, spec, first, run_id="pin-resume-test")
    kube.apps.patch_namespaced_deployment_scale("candle-vllm", seeded, {"spec": {"replicas": 0}})
    _template_changed(kube, seeded, "candle-vllm")
    _wait_live_pods_gone(kube, seeded)
    assert make_plan(kube, spec).pin_live_selector == first.pin_live_selector


@pytest.mark.slow  # three pin tests run by default
@pytest.mark.invariants(
    reason="a person's template change rolls the live Deployment out (Recreate)",
    allow=("I1", "I3"),
    services=("coder-predictor",),
)
def test_a_live_deployment_its_controller_has_not_observed_is_not_pinned(
    kube: Kube,
    sandbox: SandboxState,
    seeded: str,
    spare_gpus: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
) -> None:
    # Until the Deployment controller syncs a new template, its revision annotation
    # names the old ReplicaSet: a pin taken then would select no pod once it rolls out.
    assert sandbox.control_plane is not None, "the test needs its own control plane"
    controller = next(
        p for p in sandbox.control_plane.processes if p.name == "kube-controller-manager"
    )
    spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
    os.kill(controller.pid, signal.SIGSTOP)
    try:
        _template_changed(kube, seeded, "candle-vllm")
        with pytest.raises(PlanRefused, match=r"controller has not observed generation \d+"):
            make_plan(kube, spec)
    finally:
        os.kill(controller.pid, signal.SIGCONT)


@contextmanager
def _old_live_pod_terminating(kube: Kube, namespace: str) -> Iterator[dict[str, str]]:
    """After a rollout of the live Deployment, its old pod takes its grace period to go
    (held here by a finalizer): yields that pod's labels while it terminates."""
    (old,) = kube.core.list_namespaced_pod(namespace, label_selector="app=candle-vllm").items
    hold = {"metadata": {"finalizers": ["handoff.test/hold"]}}
    kube.core.patch_namespaced_pod(old.metadata.name, namespace, hold)
    try:
        # Rolling, so the new pod is Ready before the old one is deleted.
        _template_changed(kube, namespace, "candle-vllm", strategy={"type": "RollingUpdate"})
        deadline = time.monotonic() + 120
        name = old.metadata.name
        while not kube.core.read_namespaced_pod(name, namespace).metadata.deletion_timestamp:
            assert time.monotonic() < deadline, "the rollout did not delete the old pod in 120 s"
            time.sleep(0.5)
        yield old.metadata.labels
    finally:
        release = {"metadata": {"finalizers": None}}
        kube.core.patch_namespaced_pod(old.metadata.name, namespace, release)


@pytest.mark.slow  # three pin tests run by default
def test_terminating_live_pods_do_not_stop_the_pin(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # A Service does not route to the old pod, so it does not make the pin ambiguous.
    with _old_live_pod_terminating(kube, seeded) as old:
        spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
        pin = make_plan(kube, spec).pin_live_selector
        assert pin is not None
        assert pin["pod-template-hash"] != old["pod-template-hash"]


def test_a_rollback_holds_the_service_on_the_pin_while_the_twins_pods_run(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # The twin's pods carry the live label: until they are gone, the rolled-back Service
    # must select the live pods' template alone, though live pods of two templates exist.
    # The new live pod takes the seeds' node's free GPU: the twin and the rewritten live
    # Deployment need all four of the spare node's.
    set_cordoned(kube.api, spare_gpus, True)
    with _old_live_pod_terminating(kube, seeded):
        set_cordoned(kube.api, spare_gpus, False)
        spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
        run = start_or_resume(kube, spec, make_plan(kube, spec), run_id="pin-rollback-test")
        assert run.twin and run.ledger.pin, run.ledger
        apply_at_zero(run, None)
        wait_candidate_ready(run, 1)
        with _selectors_while_twin_runs(kube, seeded) as seen:
            rollback(kube, spec, cause="the gates failed")
    assert seen, "the twin's pods were gone before the rollback began"
    wrong = [s.selector for s in seen if s.selector != run.ledger.pin]
    assert not wrong, f"the Service selected {wrong[0]} while the twin's pods ran"
    assert service(kube, seeded, "coder-predictor").spec.selector == {"app": "candle-vllm"}


@pytest.mark.slow  # three pin tests run by default
@pytest.mark.invariants(
    reason="a person restarts the live Deployment: the pin selects no pod until the rollback",
    allow=("I1",),
    services=("coder-predictor",),
)
def test_a_rollback_pins_to_the_live_deployment_a_person_restarted(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # `kubectl rollout restart` of the live Deployment while the twin runs gives its pods
    # a new pod-template-hash; the rollback leaves it as edited, so a hold on the hash
    # recorded at plan time would select no pod until the twin's pods are gone.
    spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
    run = start_or_resume(kube, spec, make_plan(kube, spec), run_id="pin-restart-test")
    assert run.twin and run.ledger.pin, run.ledger
    apply_at_zero(run, None)
    wait_candidate_ready(run, 1)
    _template_changed(kube, seeded, "candle-vllm")
    wait_rolled_out(kube, seeded, "candle-vllm", deadline_s=120)
    edited = [c.object for c in drift.observe(run)]
    assert edited == ["Deployment candle-vllm"], edited
    with _selectors_while_twin_runs(kube, seeded) as seen:
        rollback(kube, spec, cause="a person restarted the live Deployment", leave=edited)
    assert seen, "the twin's pods were gone before the rollback began"
    # Until the rollback writes the selector, it is the handoff's pin, stale since the restart.
    first = next((i for i, s in enumerate(seen) if s.serves_live), None)
    assert first is not None, f"the Service was held on {seen[-1].selector}, no Ready live pod"
    assert all(s.selector == run.ledger.pin for s in seen[:first]), seen[:first]
    empty = [s.selector for s in seen[first:] if not s.serves_live]
    assert not empty, f"the Service selected {empty[0]}, no Ready live pod, while the twin ran"
    assert service(kube, seeded, "coder-predictor").spec.selector == {"app": "candle-vllm"}


@dataclasses.dataclass(frozen=True)
class _Sample:
    selector: dict[str, str]
    serves_live: bool  # it selects a Ready pod of the live Deployment


@contextmanager
def _selectors_while_twin_runs(kube: Kube, namespace: str) -> Iterator[list[_Sample]]:
    """The Service's selector, sampled while a pod of the twin exists (read before the
    pods, so a selector is counted only if the twin's pods outlived it), until its pods
    are gone after the block. A failed read fails the test: a dead sampler checks nothing."""
    seen: list[_Sample] = []
    failed: list[BaseException] = []
    done = threading.Event()
    twin = f"candle-vllm{TWIN_SUFFIX}-"

    def sample() -> bool:
        """One sample; whether a pod of the twin still exists."""
        selector = service(kube, namespace, "coder-predictor").spec.selector
        pods = kube.core.list_namespaced_pod(namespace).items
        of_twin = [
            any(o.name.startswith(twin) for o in p.metadata.owner_references or []) for p in pods
        ]
        live = [
            p
            for p, theirs in zip(pods, of_twin, strict=True)
            if not theirs
            and is_ready(p)
            and all((p.metadata.labels or {}).get(k) == v for k, v in selector.items())
        ]
        running = any(of_twin)
        if running:
            seen.append(_Sample(selector, bool(live)))
        return running

    def watch() -> None:
        try:
            while not done.is_set():
                sample()
                time.sleep(0.05)
            deadline = time.monotonic() + 120
            while sample() and time.monotonic() < deadline:
                time.sleep(0.05)
        except BaseException as exc:  # re-raised in the test's thread after join()
            failed.append(exc)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join()
        if failed:
            raise failed[0]


@pytest.mark.slow  # three pin tests run by default
def test_a_rollback_keeping_a_twin_a_person_scaled_stays_pinned_to_the_live_pods(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # A person scales the twin during the handoff: the rollback leaves it as edited, so its
    # pods keep running with the live label. The live selector would route to both
    # versions (the invariant monitor's I2): the Service stays on the pin, and the ledger
    # says how to lift it.
    spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
    run = start_or_resume(kube, spec, make_plan(kube, spec), run_id="pin-kept-test")
    assert run.twin and run.ledger.pin, run.ledger
    apply_at_zero(run, None)
    wait_candidate_ready(run, 1)
    twin = run.candidate_name
    kube.apps.patch_namespaced_deployment_scale(twin, seeded, {"spec": {"replicas": 2}})
    edited = [c.object for c in drift.observe(run)]
    assert edited == [f"Deployment {twin}"], edited
    ledger = rollback(kube, spec, cause="a person scaled the candidate", leave=edited)
    assert ledger is not None and ledger.phase == "rolled-back", ledger
    assert service(kube, seeded, "coder-predictor").spec.selector == run.ledger.pin
    assert ledger.cause and "lift the pin" in ledger.cause, ledger.cause
    kept = kube.apps.read_namespaced_deployment(twin, seeded)
    assert kept.spec.replicas == 2, "the person's edit was undone"


@pytest.mark.invariants(
    reason="the test restarts the live Deployment (Recreate): no pod until the new one",
    allow=("I1",),
    services=("coder-predictor",),
)
def test_a_rollback_begun_by_a_version_without_pin_records_finishes_from_its_pin(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # An older version's rollback pinned the Service to the live pods' hash of the time
    # (a person had restarted the live Deployment since the plan's pin), deleted the twin,
    # and died before moving the Service back; its ledger has no `rollback_pins` key.
    # This version finishes it: that pin is the older rollback's, not a person's, and the
    # Service goes back to its own selector rather than stay pinned as "edited".
    spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
    run = start_or_resume(kube, spec, make_plan(kube, spec), run_id="legacy-pin-test")
    assert run.twin and run.ledger.pin, run.ledger
    apply_at_zero(run, None)
    _template_changed(kube, seeded, "candle-vllm")
    wait_rolled_out(kube, seeded, "candle-vllm", deadline_s=120)
    pin = {"app": "candle-vllm", "pod-template-hash": _current_hash(kube, seeded)}
    assert pin != run.ledger.pin
    kube.apps.delete_namespaced_deployment(f"candle-vllm{TWIN_SUFFIX}", seeded)
    svc = service(kube, seeded, "coder-predictor")
    older = parse_ledger(svc.metadata.annotations)
    assert older is not None
    rolling = json.loads(
        older.to(
            Phase.ROLLING_BACK, cause="a person restarted the live Deployment",
            edited=["Deployment candle-vllm"],
        ).dump()
    )  # fmt: skip
    del rolling["rollback_pins"]  # as that version wrote it
    kube.core.patch_namespaced_service(
        "coder-predictor",
        seeded,
        {"metadata": {"annotations": {ANNOTATION: json.dumps(rolling)}}, "spec": {"selector": pin}},
    )
    ledger = rollback(kube, spec, cause="resumed")
    assert ledger is not None and ledger.phase == "rolled-back", ledger
    assert "Service coder-predictor" not in ledger.edited, ledger.cause
    assert ledger.rollback_pins == [pin], ledger.rollback_pins
    assert service(kube, seeded, "coder-predictor").spec.selector == {"app": "candle-vllm"}


def _current_hash(kube: Kube, namespace: str) -> str:
    """The live Deployment's newest ReplicaSet's pod-template-hash."""
    live = kube.apps.read_namespaced_deployment("candle-vllm", namespace)
    revision = live.metadata.annotations["deployment.kubernetes.io/revision"]
    (owned,) = [
        rs
        for rs in kube.apps.list_namespaced_replica_set(namespace).items
        if rs.metadata.owner_references[0].uid == live.metadata.uid
        and rs.metadata.annotations["deployment.kubernetes.io/revision"] == revision
    ]
    return str(owned.metadata.labels["pod-template-hash"])
