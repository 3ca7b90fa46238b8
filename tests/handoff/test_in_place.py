"""The coder handoff on the seed's GPUs: its TP=2 candidate does not fit beside the
live pods, so it goes in place; the plan declares the downtime, approval covers it,
and the unavailability clients measure stays within the declaration; the pods then run
exactly the candidate manifest, though kubectl owns the live Deployment and its users
had set fields the manifest leaves out. A candidate that fits nowhere is refused at
plan time with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.capacity import Strategy
from flows.kube.client import Kube
from flows.ledger import ANNOTATION, HISTORY_ANNOTATION, history_entries, parse_ledger
from flows.plan import make_plan
from sandbox.proxy import address_of
from sandbox.seed import World
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.handoff.ownership import assert_runs_exactly_the_candidate, users_changed_the_coder
from tests.world import ROOT, load_spec_as_run, run_handoff, service, spec_in


def test_coder_goes_in_place_within_declared_downtime(
    sandbox: SandboxState,
    kube: Kube,
    world: World,
    seeded: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    users_changed_the_coder(sandbox, kube, world, seeded)
    # The latency SLO is the spec's business; here the machine may be busy with other
    # tests, and this test is about the outage, so the SLO is relaxed.
    spec_file = spec_in(
        seeded,
        "coder-14b-fp16",
        tmp_path,
        gates={"latency": {"slo": {"tpot_ms": 500, "ttft_ms": 10000}}},
    )
    plan = make_plan(kube, load_spec_as_run(spec_file, handoff_env))
    assert plan.strategy is Strategy.IN_PLACE and plan.downtime_bound_s
    cluster_ip = service(kube, seeded, "coder-predictor").spec.cluster_ip
    url = "http://" + address_of(sandbox.run_dir, seeded, "coder-predictor", 80)
    with ClientLoad(url, streams=4) as load:
        result = run_handoff(spec_file, handoff_env, "--auto-approve")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    svc = service(kube, seeded, "coder-predictor")
    assert svc.spec.cluster_ip == cluster_ip
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "done" and ledger.approver == "auto-approve"
    assert svc.spec.selector == {"app": "candle-vllm", "handoff.dev/revision": ledger.revision}
    record = history_entries(svc.metadata.annotations)[-1]
    assert record["outcome"] == "done" and record["strategy"] == "in-place"
    # In place is a real outage, and it stays inside what the plan declared.
    assert load.failed, "in place should show the declared downtime to clients"
    assert 0 < load.unavailable_s() <= plan.downtime_bound_s
    assert load.outcomes[-1].ok, "clients are served again after the swap"
    assert_runs_exactly_the_candidate(kube, seeded, spec_file, handoff_env, monkeypatch)


def test_no_room_anywhere_is_refused_with_nothing_written(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    manifest = yaml.safe_load((ROOT / "manifests/llm-serving/coder-14b-fp16.yaml").read_text())
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
