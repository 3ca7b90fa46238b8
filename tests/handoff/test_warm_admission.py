"""Warm-up when the candidate's pods cannot run yet: pods that admission refuses (a real
ResourceQuota) never exist, and the handoff fails within seconds with the apiserver's
message instead of waiting out its timeout; an Unschedulable pod fails at once by
default, and with `candidate.capacity_wait_s` it waits (as for an autoscaler adding a
node), says so in the plan, and goes on when capacity comes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from tests.world import ROOT, handoff_cli, handoff_process, run_handoff, service, spec_in

SMOKE_ONLY = {"parity": None, "latency": None}
POOL_LABEL = "pool.example.com/gpu"


def _ledger(kube: Kube, namespace: str) -> Any:
    return parse_ledger(service(kube, namespace, "clef-serve").metadata.annotations)


@pytest.mark.slow  # the unschedulable refusal runs by default
def test_pods_refused_by_a_resource_quota_fail_warm_up_at_once(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    """Three of the namespace's GPUs are in use and its quota allows three: the node
    has a free card, so the plan goes side by side, and admission refuses the pod."""
    kube.core.create_namespaced_resource_quota(
        seeded,
        {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "3"}}},
    )
    _wait_quota_counted(kube, seeded, "gpus")
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates=SMOKE_ONLY)
    result = run_handoff(spec_file, handoff_env, "--auto-approve", timeout_s=150)
    assert result.returncode != 0
    ledger = _ledger(kube, seeded)
    assert ledger is not None and ledger.phase == "rolled-back", result.stdout[-3000:]
    assert "exceeded quota: gpus" in (ledger.cause or ""), ledger.cause
    assert "cannot create its pods" in (ledger.cause or ""), ledger.cause
    record = history_entries(service(kube, seeded, "clef-serve").metadata.annotations)[-1]
    assert record["durations_s"]["warm"] < 30, record["durations_s"]
    assert service(kube, seeded, "clef-serve").spec.selector == {"app": "clef-serve"}


def _wait_quota_counted(kube: Kube, namespace: str, name: str, timeout_s: float = 30) -> None:
    """The quota controller has counted the namespace's use (admission needs it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        used = kube.core.read_namespaced_resource_quota(name, namespace).status.used or {}
        if used.get("requests.nvidia.com/gpu") == "3":
            return
        time.sleep(0.2)
    raise AssertionError(f"quota {namespace}/{name} not counted after {timeout_s} s")


@pytest.fixture
def pool(kube: Kube, seeded: str) -> Iterator[str]:
    """A node-pool label value no node has yet; removed from every node afterwards."""
    yield seeded
    for node in kube.core.list_node(label_selector=POOL_LABEL).items:
        kube.core.patch_node(node.metadata.name, {"metadata": {"labels": {POOL_LABEL: None}}})


def _pool_spec(namespace: str, tmp_path: Path, pool: str, **changes: Any) -> Path:
    """clef-candle whose pods ask for a node pool that has no node yet."""
    manifest = yaml.safe_load((ROOT / "manifests/llm-serving/clef-candle.yaml").read_text())
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {POOL_LABEL: pool}
    path = tmp_path / "pooled.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return spec_in(
        namespace,
        "clef-candle",
        tmp_path,
        candidate={"manifest": str(path), **changes},
        gates=SMOKE_ONLY,
    )


def test_unschedulable_fails_at_once_by_default(
    kube: Kube, seeded: str, pool: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = _pool_spec(seeded, tmp_path, pool)
    result = run_handoff(spec_file, handoff_env, "--auto-approve", timeout_s=150)
    assert result.returncode != 0
    ledger = _ledger(kube, seeded)
    assert ledger is not None and ledger.phase == "rolled-back"
    assert "Unschedulable" in (ledger.cause or "") and "node affinity" in (ledger.cause or "")
    record = history_entries(service(kube, seeded, "clef-serve").metadata.annotations)[-1]
    assert record["durations_s"]["warm"] < 30, record["durations_s"]


@pytest.mark.slow  # the unschedulable refusal runs by default
def test_unschedulable_waits_for_capacity_when_the_spec_allows(
    kube: Kube, seeded: str, pool: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = _pool_spec(seeded, tmp_path, pool, capacity_wait_s=120)
    plan = subprocess.run(
        handoff_cli("plan", str(spec_file)), env=handoff_env, capture_output=True, text=True
    )
    assert "wait up to 120 s for capacity" in " ".join(plan.stdout.split()), plan.stdout
    with handoff_process(spec_file, handoff_env, "--auto-approve") as process:
        pending = _wait_unschedulable(kube, seeded, process)
        time.sleep(3)  # the run keeps waiting where fail-fast would already have failed
        assert process.poll() is None, process.communicate()[0][-3000:]
        # "The autoscaler adds a node": the node with the free card joins the pool.
        kube.core.patch_node("worker-1", {"metadata": {"labels": {POOL_LABEL: pool}}})
        output, _ = process.communicate(timeout=240)
    assert process.returncode == 0, output[-3000:]
    ledger = _ledger(kube, seeded)
    assert ledger is not None and ledger.phase == "done"
    pod = kube.core.read_namespaced_pod(pending, seeded)
    assert pod.spec.node_name == "worker-1"


def _wait_unschedulable(
    kube: Kube, namespace: str, process: subprocess.Popen[str], timeout_s: float = 120
) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0][-3000:]
        for pod in kube.core.list_namespaced_pod(namespace, label_selector="app=clef-candle").items:
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                    return str(pod.metadata.name)
        time.sleep(0.2)
    raise AssertionError(f"no Unschedulable clef-candle pod after {timeout_s} s")
