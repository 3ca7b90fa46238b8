"""The live selector is pinned to the live pods (before a candidate whose pods it would
match is applied) from a fresh read of the Service under its resourceVersion, as the
swap is: a change made to the Service after the plan is neither merged into the pin
nor kept beside it, and the pinned Service selects exactly the live pods' template."""

from __future__ import annotations

import time
from pathlib import Path

from flows.apply import apply_at_zero
from flows.kube.client import Kube
from flows.plan import make_plan
from flows.start import start_or_resume
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


def test_the_pin_is_the_live_replica_sets_hash_while_its_pods_are_not_there(
    kube: Kube, seeded: str, spare_gpus: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # As a rerun right after a rollback finds it: the live Deployment is back, its
    # ReplicaSet is there, its pods are not yet. The hash comes from that ReplicaSet.
    live = kube.apps.read_namespaced_deployment("candle-vllm", seeded)
    revision = live.metadata.annotations["deployment.kubernetes.io/revision"]
    kube.apps.patch_namespaced_deployment_scale("candle-vllm", seeded, {"spec": {"replicas": 0}})
    deadline = time.monotonic() + 60
    while kube.core.list_namespaced_pod(seeded, label_selector="app=candle-vllm").items:
        assert time.monotonic() < deadline, "the live pods did not go within 60 s"
        time.sleep(0.5)
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
