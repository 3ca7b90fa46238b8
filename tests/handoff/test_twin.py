"""The coder spec replaces the live Deployment; with a node whose GPUs are free the
same spec goes side by side (through a twin Deployment) and clients see no failed
request, the Service never selects two workloads, and the live Deployment ends on
exactly the candidate's spec (though kubectl owns it and its users had set fields the
manifest leaves out) with the twin gone."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from flows.render import TWIN_SUFFIX
from sandbox.proxy import address_of
from sandbox.seed import CLIENT_API, World
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.handoff.ownership import assert_runs_exactly_the_candidate, users_changed_the_coder
from tests.world import handoff_report, run_handoff, service, spec_in


def test_coder_side_by_side_when_gpus_allow(
    sandbox: SandboxState,
    kube: Kube,
    world: World,
    seeded: str,
    spare_gpus: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    users_changed_the_coder(sandbox, kube, world, seeded)
    # The latency gate is not under test here. It passes only what it shows within every
    # margin, and on a loaded 2-core machine an identical (or faster) candidate's p99 ITL
    # interval reached 1.42 at 1 stream and 3.7 at 16 (TPOT 1.10 at 16): wider margins let
    # the handoff be shown; tests/gates/latency/ test the gate's own defaults. Three rounds
    # and no task gate (test_side_by_side runs it against a live baseline) keep it short.
    margins = {"tpot": 1.25, "itl_p99": 5.0, "throughput": 0.8}
    slo = {"tpot_ms": 500, "ttft_ms": 10000}
    spec_file = spec_in(
        seeded,
        "coder-14b-fp16",
        tmp_path,
        gates={"latency": {"slo": slo, "margins": margins, "rounds": 3}, "task": None},
    )
    cluster_ip = service(kube, seeded, "coder-predictor").spec.cluster_ip
    url = "http://" + address_of(sandbox.run_dir, seeded, "coder-predictor", 80)
    owners = _watch_endpoint_owners(kube, seeded, "coder-predictor")
    with ClientLoad(url, api=CLIENT_API["coder-predictor"], streams=16) as load:
        result = run_handoff(spec_file, handoff_env, "--auto-approve")
    owners.stop()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert load.succeeded > 0 and load.failed == [], load.failed[:3]
    svc = service(kube, seeded, "coder-predictor")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.strategy == "side-by-side" and ledger.phase == "done"
    assert svc.spec.cluster_ip == cluster_ip
    live = kube.apps.read_namespaced_deployment("candle-vllm", seeded)
    assert live.spec.template.metadata.labels["handoff.dev/revision"] == ledger.revision
    assert "coder-14b-fp16" in " ".join(live.spec.template.spec.containers[0].args)
    names = [d.metadata.name for d in kube.apps.list_namespaced_deployment(seeded).items]
    assert f"candle-vllm{TWIN_SUFFIX}" not in names
    assert owners.samples and all(len(seen) <= 1 for seen in owners.samples), (
        "the Service selected two versions at once"
    )
    # The twin shares the live pods' labels; the latency baseline is still a live pod.
    report = handoff_report(sandbox, history_entries(svc.metadata.annotations)[-1]["flow_run_id"])
    assert "**Baseline:** pod `candle-vllm-" in report and "of Deployment `candle-vllm`," in report
    assert f"**Candidate:** pod `candle-vllm{TWIN_SUFFIX}-" in report, report
    # Both sides' slots read from their command lines (the live GPTQ server's and the
    # candidate's --max-num-seqs 32): the gate keeps its default levels within the fewer.
    sides = [line for line in report.splitlines() if line.startswith("**Baseline:**")]
    assert sides and "32 requests at once (`--max-num-seqs 32` of container" in sides[0], report
    assert_runs_exactly_the_candidate(kube, seeded, spec_file, handoff_env, monkeypatch)


class _watch_endpoint_owners:
    """Samples which Deployments' pods the Service's Endpoints hold, until stopped."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self.samples: list[set[str]] = []
        self._stop = threading.Event()
        self._args = (kube, namespace, name)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        kube, namespace, name = self._args
        while not self._stop.wait(0.2):
            endpoints = kube.core.read_namespaced_endpoints(name, namespace)
            names = {a.target_ref.name for s in endpoints.subsets or [] for a in s.addresses or []}
            labels = {
                p.metadata.name: p.metadata.labels or {}
                for p in kube.core.list_namespaced_pod(namespace).items
            }
            self.samples.append(
                {labels.get(n, {}).get("handoff.dev/revision", "before") for n in names}
            )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
