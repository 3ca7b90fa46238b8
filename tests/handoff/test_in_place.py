"""The coder handoff on the seed's GPUs: its TP=2 candidate does not fit beside the
live pods, so it goes in place. Everything a person decides is asked before the old
pods stop (a late answer costs clients nothing); during the outage the gates decide
alone: a pass swaps at once, a crash loop or a parity failure rolls back at once, and
the unavailability clients measure stays within what the plan declared. After the
handoff the pods run exactly the candidate manifest, though kubectl owns the live
Deployment and its users had set fields the manifest leaves out. A candidate that fits
nowhere is refused at plan time with nothing written."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.capacity import Strategy
from flows.downtime import DEFAULT_START_S
from flows.kube.client import Kube
from flows.ledger import ANNOTATION, HISTORY_ANNOTATION, history_entries, parse_ledger
from flows.plan import make_plan
from sandbox.cluster import load_cluster
from sandbox.proxy import address_of
from sandbox.seed import CLIENT_API, World
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.handoff.ownership import assert_runs_exactly_the_candidate, users_changed_the_coder
from tests.handoff.pauses import RELAXED, PausingRun, coder_spec
from tests.world import ROOT, load_spec_as_run, run_handoff, service, spec_in

# A person who takes two minutes, on the sandbox's clock (its time scale shortens every
# simulated wait the same way): whatever it is, the old pods serve through it.
APPROVER_DELAY_S = 120 * load_cluster().time_scale

# Whole in-place handoffs with a person answering from the command line: on a shared,
# loaded machine one can take several minutes.
pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.outage_window(
        "in place: the Service has no ready pod from the old pods' stop to the swap"
    ),
]


def test_a_late_plan_approval_costs_no_downtime_and_the_gates_swap_alone(
    sandbox: SandboxState,
    kube: Kube,
    world: World,
    seeded: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    users_changed_the_coder(sandbox, kube, world, seeded)
    spec_file = coder_spec(seeded, tmp_path)
    cluster_ip = service(kube, seeded, "coder-predictor").spec.cluster_ip
    url = "http://" + address_of(sandbox.run_dir, seeded, "coder-predictor", 80)
    with ClientLoad(url, api=CLIENT_API["coder-predictor"], streams=4) as load:
        run = PausingRun.start(spec_file, handoff_env)
        try:
            plan_key = run.wait_paused()
            time.sleep(APPROVER_DELAY_S)
            assert load.succeeded and not load.failed, "the old pods serve while the plan waits"
            run.answer(handoff_env, "alice", "outage window agreed")
            assert run.finish_without_pausing(other_than=plan_key) == 0, run.output[-3000:]
        finally:
            if run.process.poll() is None:
                run.process.kill()
        time.sleep(1.0)  # clients keep going a moment after the swap
    svc = service(kube, seeded, "coder-predictor")
    assert svc.spec.cluster_ip == cluster_ip
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "done"
    assert svc.spec.selector == {"app": "candle-vllm", "handoff.dev/revision": ledger.revision}
    record = history_entries(svc.metadata.annotations)[-1]
    assert record["outcome"] == "done" and record["strategy"] == "in-place"
    assert [(a["approver"], a["what"]) for a in record["approvals"]] == [
        ("alice", "the in-place plan")
    ]
    # The model changes: the task gate judged it against the golden scores of the old one.
    assert record["gates"]["task"] == "pass", record["gates"]
    # In place is a real outage, and it stays inside what the plan declared.
    assert load.failed, "in place should show the declared downtime to clients"
    assert 0 < load.unavailable_s() <= record["downtime_estimate_s"]
    assert 0 < record["downtime_measured_s"] <= record["downtime_estimate_s"]
    assert load.outcomes[-1].ok, "clients are served again after the swap"
    # The timeline's sampled ready endpoints show the outage: served, none, served again.
    counts = [n for _, n in record["ready_endpoints"]]
    assert counts[0] >= 1 and 0 in counts and counts[-1] >= 1, counts
    assert_runs_exactly_the_candidate(kube, seeded, spec_file, handoff_env, monkeypatch)
    # The candidate's start is in the history now: the next declaration uses it.
    again = make_plan(kube, load_spec_as_run(spec_file, handoff_env))
    assert again.strategy is Strategy.IN_PLACE and again.downtime is not None
    start = next(p for p in again.downtime.parts if p.name == "candidate pods start")
    assert "in the history" in start.basis and start.seconds < DEFAULT_START_S


@pytest.mark.slow  # in place's parity failure runs by default
def test_a_crash_looping_candidate_rolls_back_at_once_within_the_declaration(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    manifest = _manifest("coder-14b-fp16.yaml")
    del manifest["spec"]["template"]["spec"]["runtimeClassName"]  # crashes at start
    spec_file = _spec_with(seeded, "coder-14b-fp16", tmp_path, manifest, gates=RELAXED)
    record, load = _approve_plan_and_fail(
        sandbox, seeded, "coder-predictor", spec_file, handoff_env
    )
    assert "crash" in record["cause"].lower()
    deployment = kube.apps.read_namespaced_deployment("candle-vllm", seeded)
    assert "Qwen3-Coder-30B-A3B" in " ".join(deployment.spec.template.spec.containers[0].args)
    assert service(kube, seeded, "coder-predictor").spec.selector == {"app": "candle-vllm"}
    _within_declaration(record, load)


def test_a_parity_failure_in_place_rolls_back_at_once_within_the_declaration(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # clef-flash on TP=2 does not fit beside the reference: in place, and built
    # without the GDN fix, so it answers well-formed but wrong.
    manifest = _manifest("clef-candle.yaml")
    resources = manifest["spec"]["template"]["spec"]["containers"][0]["resources"]
    resources["limits"]["nvidia.com/gpu"] = resources["requests"]["nvidia.com/gpu"] = "2"
    spec_file = _spec_with(
        seeded,
        "clef-candle",
        tmp_path,
        manifest,
        image={"tag": "sm70-nofix", "requires": []},
        gates={"latency": None},
    )
    record, load = _approve_plan_and_fail(sandbox, seeded, "clef-serve", spec_file, handoff_env)
    assert record["strategy"] == "in-place" and record["gates"]["parity"] == "fail"
    assert "parity fail" in record["cause"]
    reference = kube.apps.read_namespaced_deployment("clef-serve", seeded)
    assert (reference.spec.replicas, reference.status.ready_replicas) == (1, 1)
    assert kube.apps.read_namespaced_deployment("clef-candle", seeded).spec.replicas == 0
    assert service(kube, seeded, "clef-serve").spec.selector == {"app": "clef-serve"}
    _within_declaration(record, load)


def test_no_room_anywhere_is_refused_with_nothing_written(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    manifest = _manifest("coder-14b-fp16.yaml")
    resources = manifest["spec"]["template"]["spec"]["containers"][0]["resources"]
    resources["limits"]["nvidia.com/gpu"] = resources["requests"]["nvidia.com/gpu"] = "8"
    (tmp_path / "tp8.yaml").write_text(yaml.safe_dump(manifest))
    spec_file = spec_in(
        seeded, "coder-14b-fp16", tmp_path, candidate={"manifest": str(tmp_path / "tp8.yaml")}
    )
    before = service(kube, seeded, "coder-predictor")
    result = run_handoff(spec_file, handoff_env, "--auto-approve")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "refused" in output and "8 GPU" in output
    after = service(kube, seeded, "coder-predictor")
    assert after.metadata.resource_version == before.metadata.resource_version
    assert ANNOTATION not in (after.metadata.annotations or {})
    assert HISTORY_ANNOTATION not in (after.metadata.annotations or {})
    deployment = kube.apps.read_namespaced_deployment("candle-vllm", seeded)
    assert deployment.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"


def _approve_plan_and_fail(
    sandbox: SandboxState, namespace: str, svc: str, spec_file: Path, env: dict[str, str]
) -> tuple[dict[str, Any], ClientLoad]:
    """Approve the in-place plan, then expect the run to fail and roll back without
    pausing again; the history record and the clients' view."""
    url = "http://" + address_of(sandbox.run_dir, namespace, svc, 80)
    with ClientLoad(url, api=CLIENT_API[svc], streams=4) as load:
        run = PausingRun.start(spec_file, env)
        try:
            plan_key = run.wait_paused()
            assert not load.failed, "the old pods serve while the plan waits"
            run.answer(env, "alice", "try it")
            assert run.finish_without_pausing(other_than=plan_key) != 0
        finally:
            if run.process.poll() is None:
                run.process.kill()
        time.sleep(1.0)  # clients keep going a moment after the rollback
    from flows.kube.client import connect

    kube = connect(sandbox.kubeconfig)
    try:
        annotations = service(kube, namespace, svc).metadata.annotations
    finally:
        kube.close()
    ledger = parse_ledger(annotations)
    assert ledger is not None and ledger.phase == "rolled-back", run.output[-3000:]
    record = history_entries(annotations)[-1]
    assert record["outcome"] == "rolled-back"
    return record, load


def _within_declaration(record: dict[str, Any], load: ClientLoad) -> None:
    assert 0 < record["downtime_measured_s"] <= record["downtime_bound_s"]
    assert load.failed and 0 < load.unavailable_s() <= record["downtime_bound_s"]
    assert load.outcomes[-1].ok, "clients are served by the old pods again"


def _manifest(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "manifests/llm-serving" / name).read_text())


def _spec_with(
    namespace: str, name: str, tmp_path: Path, manifest: dict[str, Any], **changes: Any
) -> Path:
    path = tmp_path / f"candidate-{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return spec_in(namespace, name, tmp_path, candidate={"manifest": str(path)}, **changes)
