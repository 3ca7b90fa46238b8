"""The latency gate's baseline is a live pod, found by owner, on the live pods' own port.

Here the candidate's pods carry the live Deployment's `app` label (as a twin's do) and
their names sort first, so a pick by label would measure the candidate against itself;
and the live server listens on 8000 while the candidate listens on 8080, the Service
reaching both through a named targetPort. The handoff's gate report names a baseline
pod of the live Deployment's current ReplicaSet on port 8000 and a candidate pod of
the candidate Deployment on port 8080."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.kube.client import Kube
from flows.kube.write import apply_manifest
from flows.ledger import history_entries, parse_ledger
from sandbox.seed import World, before_state_documents
from sandbox.state import SandboxState
from tests.world import (
    ROOT,
    handoff_progress,
    handoff_report,
    remove_seeded,
    run_handoff,
    service,
    spec_in,
    wait_deployments_ready,
)

LIVE_PORT, CANDIDATE_PORT = 8000, 8080
LEFT_OUT = {"candle-vllm", "reasoning-long"}  # not needed here: fewer processes


def _live_on_8000(doc: dict[str, Any]) -> dict[str, Any]:
    """clef-serve listening on 8000 (a named port), its Service reaching it by name."""
    if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "clef-serve":
        container = doc["spec"]["template"]["spec"]["containers"][0]
        container["ports"] = [{"name": "http", "containerPort": LIVE_PORT}]
        for probe in ("startupProbe", "readinessProbe"):
            container[probe]["httpGet"]["port"] = "http"
    if doc["kind"] == "Service" and doc["metadata"]["name"] == "clef-serve":
        for port in doc["spec"]["ports"]:
            port["targetPort"] = "http"
    return doc


@pytest.fixture
def live_on_8000(kube: Kube, world: World) -> Iterator[str]:
    namespace = f"llm-{uuid.uuid4().hex[:8]}"
    for doc in before_state_documents(world, namespace):
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] in LEFT_OUT:
            continue
        apply_manifest(kube, _live_on_8000(doc))
    wait_deployments_ready(kube, namespace, ("clef-serve",))
    yield namespace
    remove_seeded(kube, namespace)


def _candidate_sharing_the_live_label(tmp_path: Path) -> Path:
    manifest = yaml.safe_load((ROOT / "manifests/llm-serving/clef-candle.yaml").read_text())
    labels = {"app": "clef-serve", "engine": "candle"}
    manifest["spec"]["selector"]["matchLabels"] = labels
    manifest["spec"]["template"]["metadata"]["labels"] = labels
    manifest["spec"]["template"]["spec"]["containers"][0]["ports"] = [
        {"name": "http", "containerPort": CANDIDATE_PORT}
    ]
    path = tmp_path / "clef-candle-shared-label.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def test_latency_baseline_is_a_live_pod_on_the_live_port(
    sandbox: SandboxState,
    kube: Kube,
    live_on_8000: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
) -> None:
    namespace = live_on_8000
    # The latency gate is not under test here. It passes only what it shows within every
    # margin, and on a loaded 2-core machine an identical (or faster) candidate's p99 ITL
    # interval reached 1.42 at 1 stream and 3.7 at 16 (TPOT 1.10 at 16): wider margins let
    # the handoff be shown; tests/gates/latency/ test the gate's own defaults.
    margins = {"tpot": 1.25, "itl_p99": 5.0, "throughput": 0.8}
    spec_file = spec_in(
        namespace,
        "clef-candle",
        tmp_path,
        candidate={
            "manifest": str(_candidate_sharing_the_live_label(tmp_path)),
            "port": CANDIDATE_PORT,
        },
        gates={"parity": None, "latency": {"levels": [1], "margins": margins, "rounds": 3}},
    )
    result = run_handoff(spec_file, handoff_env, "--auto-approve")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    svc = service(kube, namespace, "clef-serve")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "done"
    record = history_entries(svc.metadata.annotations)[-1]
    report = handoff_report(sandbox, record["flow_run_id"])
    assert handoff_progress(sandbox, record["flow_run_id"]) == 100.0
    live_rs = _current_replica_set(kube, namespace, "clef-serve")
    assert (
        f"**Baseline:** pod `{live_rs}-" in report
        and f"of ReplicaSet `{live_rs}`" in report
        and f"of Deployment `clef-serve`, port {LIVE_PORT}" in report
    ), report
    assert "**Candidate:** pod `clef-candle-" in report, report
    assert f"of Deployment `clef-candle`, port {CANDIDATE_PORT}, on node `" in report, report
    # Both sides' nodes named, the design that ran, and the baseline's load from others.
    assert "**Design:** alternating rounds, never both sides under load at once" in report
    assert "- baseline's load from others" in report, report


def _current_replica_set(kube: Kube, namespace: str, deployment: str) -> str:
    live = kube.apps.read_namespaced_deployment(deployment, namespace)
    revision = live.metadata.annotations["deployment.kubernetes.io/revision"]
    for rs in kube.apps.list_namespaced_replica_set(namespace).items:
        owners = [o.uid for o in rs.metadata.owner_references or []]
        if live.metadata.uid in owners and (
            rs.metadata.annotations["deployment.kubernetes.io/revision"] == revision
        ):
            return str(rs.metadata.name)
    raise AssertionError(f"no current ReplicaSet of {namespace}/{deployment}")
