"""The clef-candle handoff on the seed's GPUs (one card free): side by side, invisible
to clients at 16 streams across the swap, a short bake and the retirement, the ClusterIP
kept, the reference kept at 0. A candidate that answers wrongly (the image without the GDN conv
fix) or crash-loops (no nvidia runtime class) is rolled back with the Service still on
the reference, and the report says why."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from flows.report.stepview import STEPS
from sandbox.proxy import address_of
from sandbox.seed import CLIENT_API
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.world import (
    ROOT,
    handoff_pictures,
    handoff_progress,
    handoff_report,
    run_handoff,
    service,
    spec_in,
)


def _service_events(kube: Kube, namespace: str, reason: str) -> list[str]:
    """Messages of the clef-serve Service's Events with `reason`, as kubectl describe shows."""
    events = kube.core.list_namespaced_event(
        namespace, field_selector="involvedObject.kind=Service,involvedObject.name=clef-serve"
    )
    return [e.message for e in events.items if e.reason == reason]


def _clients(sandbox: SandboxState, namespace: str) -> ClientLoad:
    url = "http://" + address_of(sandbox.run_dir, namespace, "clef-serve", 80)
    return ClientLoad(url, api=CLIENT_API["clef-serve"], streams=16)


# The whole handoff at the gates' default settings, with 16 client streams on the live
# pod: about 220 s on a quiet 2-core machine, past 300 s on a loaded one (seen in CI).
@pytest.mark.timeout(900)
def test_clef_candle_side_by_side_without_a_failed_request(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # A task gate without golden scores: only the live pod can be its baseline here. At a
    # 10-point margin the 32-case suite can pass a candidate that keeps every case.
    suite = str(ROOT / "manifests" / "tasks" / "coder.yaml")
    # The latency gate is not under test here. It passes only what it shows within every
    # margin, and on a loaded 2-core machine an identical (or faster) candidate's p99 ITL
    # interval reached 1.42 at 1 stream and 3.7 at 16 (TPOT 1.10 at 16): wider margins let
    # the handoff be shown; tests/gates/latency/ test the gate's own defaults.
    margins = {"tpot": 1.25, "ttft": 1.5, "itl_p99": 5.0, "throughput": 0.8}
    # The clients below load the live pod, the gate's baseline, on purpose: the gate
    # reports that load (asserted below) and, by default, gives such a level no verdict
    # (tests/gates/latency/test_gate.py); here it is told to weigh it as a person would.
    latency = {"margins": margins, "max_baseline_others_share": 100.0}
    # A short bake: the old pods stay Ready for 3 s while a probe through the Service
    # checks the candidate's first tokens; a clean one retires (tests/handoff/test_bake.py:
    # a breach goes back).
    probe = {"url": _clients(sandbox, seeded).url, "every_s": 0.5}
    spec_file = spec_in(
        seeded,
        "clef-candle",
        tmp_path,
        gates={"task": {"suite": suite, "margin": 10}, "latency": latency},
        bake={"duration_s": 3, "interval_s": 0.5, "probe": probe},
    )
    cluster_ip = service(kube, seeded, "clef-serve").spec.cluster_ip
    with _clients(sandbox, seeded) as load:
        result = run_handoff(spec_file, handoff_env, "--auto-approve", timeout_s=480)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert load.succeeded > 0 and load.failed == [], load.failed[:3]
    for step in STEPS:  # the run's step table, as `handoff run` leaves it
        assert re.search(rf"│ {step}\s+│ done\s+│", result.stdout), (step, result.stdout[-2000:])
    svc = service(kube, seeded, "clef-serve")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "done" and ledger.strategy == "side-by-side"
    assert svc.spec.cluster_ip == cluster_ip
    assert svc.spec.selector == {"app": "clef-candle", "handoff.dev/revision": ledger.revision}
    assert "@sha256:" in (ledger.image or "")
    endpoints = kube.core.read_namespaced_endpoints("clef-serve", seeded)
    ready = [a.target_ref.name for s in endpoints.subsets for a in s.addresses]
    assert ready and all(name.startswith("clef-candle-") for name in ready)
    assert kube.apps.read_namespaced_deployment("clef-serve", seeded).spec.replicas == 0
    record = history_entries(svc.metadata.annotations)[-1]
    assert record["gates"] == {"smoke": "pass", "parity": "pass", "task": "pass", "latency": "pass"}
    pictures = handoff_pictures(sandbox, record["flow_run_id"])
    assert pictures.startswith("## latency gate: pass") and "](data:image/png;base64," in pictures
    # The Service's clients were seen on the baseline, by its own token counter.
    seen = re.findall(
        r"baseline's load from others: ([\d.]+) tokens/s",
        handoff_report(sandbox, record["flow_run_id"]),
    )
    assert seen and max(map(float, seen)) > 0, seen
    parity = handoff_pictures(sandbox, record["flow_run_id"], "parity")
    assert parity.startswith("## parity gate: pass") and "](data:image/png;base64," in parity
    # The timeline: every step timed in order, and the Service never without a ready endpoint.
    assert [s["name"] for s in record["steps"]] == list(STEPS)
    assert record["ready_endpoints"] and all(n >= 1 for _, n in record["ready_endpoints"])
    # ... served by the live workload before the swap and by the candidate after it.
    by_workload = [counts for _, counts in record["ready_by_workload"]]
    assert by_workload[0].keys() == {"live"} and by_workload[-1].keys() == {"candidate"}, (
        by_workload
    )
    assert record["workloads"] == {"live": "clef-serve", "candidate": "clef-candle"}
    timeline = handoff_pictures(sandbox, record["flow_run_id"], "timeline")
    assert timeline.startswith("## timeline: done") and "](data:image/png;base64," in timeline
    assert "ready endpoints: the Service's Endpoints read every 1 s" in timeline
    assert "shaded, the bake: pass after " in timeline
    assert any("ancestor" in fix for fix in record["fixes"])
    bake = record["bake"]
    assert bake["verdict"] == "pass" and bake["probe_turns"] >= 2 and bake["seconds"] >= 3, bake
    assert any("exposes no /metrics" in line for line in bake["not_watched"]), bake  # candle-vllm
    completed = _service_events(kube, seeded, "HandoffCompleted")
    assert any(m.startswith(f"handoff {ledger.handoff_id} (clef-candle): done") for m in completed)


def test_wrong_answers_roll_back(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    """The last build without the fix, taken without the provenance requirement."""
    # Parity decides; latency only has to leave its picture (tests/gates/latency/ test it).
    quick = {"latency": {"levels": [1], "rounds": 3}}
    spec_file = spec_in(
        seeded, "clef-candle", tmp_path, image={"tag": "sm70-nofix", "requires": []}, gates=quick
    )
    with _clients(sandbox, seeded) as load:
        result = run_handoff(spec_file, handoff_env, "--auto-approve")
    assert result.returncode != 0
    assert load.failed == [], load.failed[:3]
    svc = service(kube, seeded, "clef-serve")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back"
    assert "parity fail" in (ledger.cause or "")
    rolled_back = _service_events(kube, seeded, "HandoffRolledBack")
    assert any(m.startswith(f"handoff {ledger.handoff_id} rolled back: ") for m in rolled_back)
    assert svc.spec.selector == {"app": "clef-serve"}
    assert kube.apps.read_namespaced_deployment("clef-candle", seeded).spec.replicas == 0
    assert "first divergence" in result.stdout + result.stderr or "diverg" in (
        result.stdout + result.stderr
    )
    flow_run_id = history_entries(svc.metadata.annotations)[-1]["flow_run_id"]
    assert handoff_progress(sandbox, flow_run_id) == 100.0  # a rollback ends the run
    pictures = handoff_pictures(sandbox, flow_run_id)  # failed gates show theirs too
    assert pictures.startswith("## latency gate: ") and "](data:image/png;base64," in pictures
    parity = handoff_pictures(sandbox, flow_run_id, "parity")
    assert parity.startswith("## parity gate: fail") and "](data:image/png;base64," in parity
    timeline = handoff_pictures(sandbox, flow_run_id, "timeline")  # a rollback draws one too
    assert timeline.startswith("## timeline: rolled-back"), timeline[:200]
    steps = [s["name"] for s in history_entries(svc.metadata.annotations)[-1]["steps"]]
    assert steps[-2:] == ["gates", "rollback"], steps
    report = handoff_report(sandbox, flow_run_id)  # its verdict and reason first
    lines = report.splitlines()
    assert lines[0].endswith(": rolled-back") and lines[1].startswith("**Cause:** gates did not")
    assert lines[3].startswith("**Gates:** FAIL: parity fail: "), lines[:5]
    gate_headings = [line for line in lines if line.startswith("### ")]
    assert gate_headings[:2] == ["### smoke: pass", "### parity: fail"], gate_headings
    assert len({h.split(":")[0] for h in gate_headings}) == len(gate_headings), gate_headings
    assert " gate: " not in report and not re.search(r"\d\.\d{6,}", report), report


def crash_looping_spec(namespace: str, tmp_path: Path, **changes: Any) -> Path:
    """The clef-candle spec with a candidate that crash-loops: without its runtime class
    its pod finds no GPU library."""
    manifest = yaml.safe_load((ROOT / "manifests/llm-serving/clef-candle.yaml").read_text())
    del manifest["spec"]["template"]["spec"]["runtimeClassName"]
    (tmp_path / "no-runtime-class.yaml").write_text(yaml.safe_dump(manifest))
    candidate = {"manifest": str(tmp_path / "no-runtime-class.yaml")}
    return spec_in(namespace, "clef-candle", tmp_path, candidate=candidate, **changes)


@pytest.mark.slow  # in place's crash loop runs by default
def test_crash_looping_candidate_rolls_back_within_seconds(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = crash_looping_spec(seeded, tmp_path)
    result = run_handoff(spec_file, handoff_env, "--auto-approve")
    assert result.returncode != 0
    svc = service(kube, seeded, "clef-serve")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back"
    assert "crashed" in (ledger.cause or "") or "CrashLoopBackOff" in (ledger.cause or "")
    assert "Unable to dynamically load the cuda shared library" in (ledger.cause or "")
    assert svc.spec.selector == {"app": "clef-serve"}
    record = history_entries(svc.metadata.annotations)[-1]
    assert record["durations_s"]["warm"] < 30, record["durations_s"]
    assert handoff_progress(sandbox, record["flow_run_id"]) == 100.0  # a rollback ends the run
