"""Every write is decided from a read, and a person's edit made meanwhile is never
overwritten nor built upon: `kubectl set image` on a gated candidate stops the handoff
before the swap (the pods keep the gated revision label, but not the gated template); a
selector a person sets during the swap's wait for a Ready pod, or for its routes, is left
as it is; a killed run whose candidate manifest has changed since it was gated refuses to
resume; a count a person sets on the live Deployment during a rollback is not restored
over."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from flows.apply import apply_at_zero
from flows.kube.client import Kube
from flows.ledger import REVISION_LABEL, parse_ledger
from flows.plan import make_plan
from flows.rollback import rollback
from flows.start import start_or_resume
from sandbox.state import SandboxState
from tests.handoff.pauses import PausingRun
from tests.handoff.test_swap_ready import _stopped
from tests.world import (
    LEASE_S,
    await_phase,
    handoff_process,
    load_spec_as_run,
    run_handoff,
    run_rollback,
    service,
    spec_in,
)

FAST = {"parity": None, "latency": None}
SERVICE = "clef-serve"


def _phase(kube: Kube, namespace: str) -> str | None:
    ledger = parse_ledger(service(kube, namespace, SERVICE).metadata.annotations or {})
    return ledger.phase if ledger else None


def test_a_candidate_whose_image_a_person_changed_after_its_gates_is_not_swapped_to(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates=FAST)
    before = service(kube, seeded, SERVICE).spec.selector
    run = PausingRun.start(spec_file, handoff_env)
    try:
        key = run.wait_paused()  # the gates passed; the approval waits
        gated = kube.apps.read_namespaced_deployment("clef-candle", seeded)
        container = gated.spec.template.spec.containers[0]
        edited = container.image.split("@")[0] + ":sm70-nofix"  # `kubectl set image`
        kube.apps.patch_namespaced_deployment(
            "clef-candle",
            seeded,
            {"spec": {"template": {"spec": {"containers": [
                {"name": container.name, "image": edited}
            ]}}}},
        )  # fmt: skip
        run.answer(handoff_env, "alice", "looks good")
        code = run.finish_without_pausing(other_than=key)
    finally:
        if run.process.poll() is None:
            run.process.kill()
    assert code != 0, run.output[-3000:]
    svc = service(kube, seeded, SERVICE)
    assert svc.spec.selector == before, "the Service was moved to the edited candidate"
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back", run.output[-3000:]
    assert ledger.cause and "spec.template" in ledger.cause, ledger.cause
    kept = kube.apps.read_namespaced_deployment("clef-candle", seeded)
    assert kept.spec.template.spec.containers[0].image == edited, "the person's edit was undone"


@pytest.mark.slow  # its sibling at the routes wait runs by default
def test_a_selector_a_person_sets_during_the_swaps_wait_is_not_overwritten(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates=FAST)
    live = kube.core.list_namespaced_pod(seeded, label_selector="app=clef-serve").items[0]
    chosen = {"app": "clef-serve", "pod-template-hash": live.metadata.labels["pod-template-hash"]}
    run = PausingRun.start(spec_file, handoff_env)
    try:
        key = run.wait_paused()
        with _stopped(kube, sandbox, seeded):  # the swap waits for a Ready candidate pod
            run.answer(handoff_env, "alice", "looks good")
            deadline = time.monotonic() + 120
            while _phase(kube, seeded) != "approved":
                assert run.process.poll() is None, run.output[-3000:]
                assert time.monotonic() < deadline, "the run never recorded the approval"
                time.sleep(0.1)
            time.sleep(2)  # past the swap step's first drift check: it is waiting now
            kube.core.patch_namespaced_service(SERVICE, seeded, {"spec": {"selector": chosen}})
        code = run.finish_without_pausing(other_than=key)
    finally:
        if run.process.poll() is None:
            run.process.kill()
    assert code != 0, run.output[-3000:]
    svc = service(kube, seeded, SERVICE)
    assert svc.spec.selector == chosen, "the person's selector was overwritten"
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back", run.output[-3000:]
    assert ledger.edited == [f"Service {SERVICE}"], ledger


def test_a_selector_a_person_sets_while_the_swap_waits_for_its_routes_is_not_overwritten(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    """The swap has switched the selector and waits for the routes to follow; a person
    narrows it to the live pods' ReplicaSet meanwhile. The wait ends on that edit, and
    the rollback leaves it (the person's selector has the shape of a pin of the live
    workload, which the rollback would otherwise take for its own and restore over)."""
    assert sandbox.control_plane is not None, "the test needs its own control plane"
    controller = next(
        p for p in sandbox.control_plane.processes if p.name == "kube-controller-manager"
    )
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates=FAST)
    live = kube.core.list_namespaced_pod(seeded, label_selector="app=clef-serve").items[0]
    chosen = {"app": "clef-serve", "pod-template-hash": live.metadata.labels["pod-template-hash"]}
    run = PausingRun.start(spec_file, handoff_env)
    try:
        key = run.wait_paused()
        # Stopped, the endpoints controller does not follow the swap: its wait goes on.
        os.kill(controller.pid, signal.SIGSTOP)
        try:
            run.answer(handoff_env, "alice", "looks good")
            deadline = time.monotonic() + 120
            while REVISION_LABEL not in (now := service(kube, seeded, SERVICE).spec.selector):
                assert run.process.poll() is None, run.output[-3000:]
                assert time.monotonic() < deadline, "the swap never switched the selector"
                time.sleep(0.1)
            dropped = {k: None for k in now if k not in chosen}  # replaced, as `kubectl edit`
            body = {"spec": {"selector": {**dropped, **chosen}}}
            kube.core.patch_namespaced_service(SERVICE, seeded, body)
        finally:
            os.kill(controller.pid, signal.SIGCONT)
        code = run.finish_without_pausing(other_than=key)
    finally:
        if run.process.poll() is None:
            run.process.kill()
    assert code != 0, run.output[-3000:]
    svc = service(kube, seeded, SERVICE)
    assert svc.spec.selector == chosen, "the person's selector was overwritten"
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back", run.output[-3000:]
    assert ledger.edited == [f"Service {SERVICE}"], ledger
    assert ledger.cause and "spec.selector" in ledger.cause, ledger.cause


def test_a_killed_run_whose_manifest_changed_since_its_gates_refuses_to_resume(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates=FAST)
    with handoff_process(spec_file, handoff_env) as process:  # pauses for its approval
        await_phase(kube, seeded, SERVICE, "gated", process)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    stopped = service(kube, seeded, SERVICE)
    candidate = kube.apps.read_namespaced_deployment("clef-candle", seeded)
    manifest_file = Path(yaml.safe_load(spec_file.read_text())["candidate"]["manifest"])
    documents = list(yaml.safe_load_all(manifest_file.read_text()))
    for doc in documents:
        if doc and doc.get("kind") == "Deployment":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            container.setdefault("env", []).append({"name": "CHANGED", "value": "after-gates"})
    manifest_file.write_text(yaml.safe_dump_all(documents))
    time.sleep(float(LEASE_S) + 2)  # the killed run's Lease lapses
    result = run_handoff(spec_file, handoff_env, "--auto-approve", timeout_s=240)
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode != 0, output
    assert "ungated template" in " ".join(output.split()), output
    after = service(kube, seeded, SERVICE)
    assert after.metadata.annotations == stopped.metadata.annotations, "the ledger was written"
    assert after.spec.selector == stopped.spec.selector
    assert REVISION_LABEL not in after.spec.selector
    now = kube.apps.read_namespaced_deployment("clef-candle", seeded)
    assert now.metadata.resource_version == candidate.metadata.resource_version


def _recreate(kube: Kube, namespace: str, saved: client.V1Deployment) -> None:
    """The Deployment created again from a copy read before it was deleted."""
    body = kube.api.sanitize_for_serialization(saved)
    meta = body["metadata"]
    body["metadata"] = {
        k: v for k, v in meta.items() if k in ("name", "namespace", "labels", "annotations")
    }
    body.pop("status", None)
    kube.apps.create_namespaced_deployment(namespace, body)


@pytest.mark.timeout(600)  # a handoff, its rollback and a rollback by hand
def test_a_rollback_whose_live_workload_cannot_serve_keeps_the_service_on_the_candidate(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    """The live Deployment is deleted once the Service has moved: the rollback finds
    nothing Ready to move back to, so the Service stays on the candidate that serves,
    and the handoff stays rolling-back until a person brings the live workload back and
    runs `handoff rollback`, which then finishes."""
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates=FAST)
    live = kube.apps.read_namespaced_deployment(SERVICE, seeded)
    with handoff_process(spec_file, handoff_env, "--auto-approve") as process:
        await_phase(kube, seeded, SERVICE, "swapped", process)
        kube.apps.delete_namespaced_deployment(SERVICE, seeded)
        output, _ = process.communicate(timeout=300)
    assert process.returncode != 0, output[-3000:]
    said = " ".join(output.split())
    # At once, not after READY_AFTER_RESTORE_S: nothing is left that could become Ready.
    assert "not moved back" in said and "exists any more" in said, output[-3000:]
    assert "Create the live workload again" in said, output[-3000:]
    svc = service(kube, seeded, SERVICE)
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolling-back", output[-3000:]
    assert svc.spec.selector.get(REVISION_LABEL) == ledger.revision, svc.spec.selector
    endpoints = kube.core.read_namespaced_endpoints(SERVICE, seeded)
    assert any(s.addresses for s in endpoints.subsets or []), "the Service was left empty"
    _recreate(kube, seeded, live)
    time.sleep(float(LEASE_S) + 2)  # the run's Lease lapses
    result = run_rollback(spec_file, handoff_env, "live workload is back")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    svc = service(kube, seeded, SERVICE)
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back", result.stdout[-3000:]
    assert svc.spec.selector == {"app": SERVICE}, svc.spec.selector


@pytest.mark.slow  # the model check searches the person's counts by default
def test_a_count_a_person_sets_on_the_live_deployment_during_a_rollback_is_left(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    """The handoff has written (the candidate applied at 0); a rollback begins and a person
    scales the live Deployment from 1 to 2 before it is restored. 2 is no count this
    handoff can have left it at (1, or 0 once retired), so the restore leaves it and says
    so in the recorded cause, rather than scaling it back over the person's choice."""
    spec = load_spec_as_run(spec_in(seeded, "clef-candle", tmp_path, gates=FAST), handoff_env)
    run = start_or_resume(kube, spec, make_plan(kube, spec), run_id="person-scale-test")
    apply_at_zero(run, None)
    kube.apps.patch_namespaced_deployment_scale(SERVICE, seeded, {"spec": {"replicas": 2}})
    ledger = rollback(kube, spec, cause="the gates failed")
    assert ledger is not None and ledger.phase == "rolled-back", ledger
    assert kube.apps.read_namespaced_deployment(SERVICE, seeded).spec.replicas == 2
    assert ledger.cause and "someone else scaled it" in ledger.cause, ledger.cause
