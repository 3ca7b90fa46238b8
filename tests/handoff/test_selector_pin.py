"""The live selector is pinned to the pod-template-hash of the live Deployment's current
ReplicaSet (before a candidate whose pods it would match is applied) from a fresh read of
the Service under its resourceVersion, as the swap is: a change made to the Service after
the plan is neither merged into the pin nor kept beside it, and the pinned Service
selects exactly the live pods' template. A resumed run keeps the pin its ledger
recorded; a live Deployment whose controller has not caught up is not pinned."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from flows.apply import apply_at_zero
from flows.kube.client import Kube
from flows.plan import PlanRefused, make_plan
from flows.start import start_or_resume
from sandbox.state import SandboxState
from tests.world import load_spec_as_run, service, spec_in


def test_the_pin_is_computed_from_the_service_as_it_is_now(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
    plan = make_plan(kube, spec)
    assert plan.pin_live_selector, "the twin's pods match the live selector: it must be pinned"
    run = start_or_resume(kube, spec, plan, run_id="pin-test")
    # Someone edits the Service between the plan and the pin.
    kube.core.patch_namespaced_service(
        "coder-predictor", seeded, {"spec": {"selector": {"tier": "serving"}}}
    )
    apply_at_zero(run, None)
    assert service(kube, seeded, "coder-predictor").spec.selector == plan.pin_live_selector


def _wait_live_pods_gone(kube: Kube, namespace: str) -> None:
    deadline = time.monotonic() + 60
    while kube.core.list_namespaced_pod(namespace, label_selector="app=candle-vllm").items:
        assert time.monotonic() < deadline, "the live pods did not go within 60 s"
        time.sleep(0.5)


def test_the_pin_is_the_live_replica_sets_hash_while_its_pods_are_not_there(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # As a rerun right after a rollback finds it: the live Deployment is back, its
    # ReplicaSet is there, its pods are not yet. The hash comes from that ReplicaSet.
    live = kube.apps.read_namespaced_deployment("candle-vllm", seeded)
    revision = live.metadata.annotations["deployment.kubernetes.io/revision"]
    kube.apps.patch_namespaced_deployment_scale("candle-vllm", seeded, {"spec": {"replicas": 0}})
    _wait_live_pods_gone(kube, seeded)
    (owned,) = [
        rs
        for rs in kube.apps.list_namespaced_replica_set(seeded).items
        if rs.metadata.owner_references[0].uid == live.metadata.uid
        and rs.metadata.annotations["deployment.kubernetes.io/revision"] == revision
    ]
    spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
    plan = make_plan(kube, spec)
    assert plan.pin_live_selector == {
        "app": "candle-vllm",
        "pod-template-hash": owned.metadata.labels["pod-template-hash"],
    }


def _template_changed(kube: Kube, namespace: str, deployment: str, **spec: object) -> None:
    """A new pod template for the Deployment: a new ReplicaSet, a new pod-template-hash."""
    template = {"metadata": {"annotations": {"touched": str(time.time())}}}
    kube.apps.patch_namespaced_deployment(
        deployment, namespace, {"spec": {"template": template, **spec}}
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


def test_terminating_live_pods_do_not_stop_the_pin(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # After a rollout of the live Deployment, its old pods take their grace period to
    # go; a Service does not route to them, so they do not make the pin ambiguous.
    (old,) = kube.core.list_namespaced_pod(seeded, label_selector="app=candle-vllm").items
    hold = {"metadata": {"finalizers": ["handoff.test/hold"]}}
    kube.core.patch_namespaced_pod(old.metadata.name, seeded, hold)
    try:
        # Rolling, so the new pod is Ready before the old one is deleted.
        _template_changed(kube, seeded, "candle-vllm", strategy={"type": "RollingUpdate"})
        deadline = time.monotonic() + 120
        name = old.metadata.name
        while not kube.core.read_namespaced_pod(name, seeded).metadata.deletion_timestamp:
            assert time.monotonic() < deadline, "the rollout did not delete the old pod in 120 s"
            time.sleep(0.5)
        spec = load_spec_as_run(spec_in(seeded, "coder-14b-fp16", tmp_path), handoff_env)
        pin = make_plan(kube, spec).pin_live_selector
        assert pin is not None
        assert pin["pod-template-hash"] != old.metadata.labels["pod-template-hash"]
    finally:
        release = {"metadata": {"finalizers": None}}
        kube.core.patch_namespaced_pod(old.metadata.name, seeded, release)
