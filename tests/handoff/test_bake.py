"""The bake: side by side, after the swap and the scale-up, the old workload stays Ready
and serves nothing while the candidate is watched. A candidate that starts failing a
third of its requests is left within seconds for the old pods, still warm (no cold
start, no new pod), and the handoff ends rolled back with the breach named; clients
fail only between the fault and the Service's return. (A clean bake that retires:
tests/handoff/test_side_by_side.py.)"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import httpx
import pytest

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from sandbox.modelserver.surface import CANDLE_VLLM_OWNER
from sandbox.proxy import address_of
from sandbox.seed import CLIENT_API
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.world import PROXY_SYNC_S, run_handoff, service, spec_in

pytestmark = pytest.mark.timeout(600)  # a whole handoff and its rollback, on a shared machine

OLD = {"app": "clef-serve"}
BREACH_WITHIN_S = 10.0  # the fault on to the Service back on the old pods
# After the Service is back: the proxies' sync, then the candidate's stop, whose server
# closes each kept-alive connection after its next answer (its clients then reconnect).
AFTER_RETURN_S = float(PROXY_SYNC_S) + 5.0


def _bake_spec(sandbox: SandboxState, namespace: str, tmp_path: Path, duration_s: float) -> Path:
    url = "http://" + address_of(sandbox.run_dir, namespace, "clef-serve", 80)
    bake = {
        "duration_s": duration_s,
        "interval_s": 0.5,
        "probe": {"url": url, "every_s": 0.5, "turns": 3},
    }
    # Only smoke and parity: the bake, not the latency gate, is under test.
    return spec_in(namespace, "clef-candle", tmp_path, gates={"latency": None}, bake=bake)


def _clients(sandbox: SandboxState, namespace: str) -> ClientLoad:
    url = "http://" + address_of(sandbox.run_dir, namespace, "clef-serve", 80)
    return ClientLoad(url, api=CLIENT_API["clef-serve"], streams=8)


def _new_connections_reach_candle(sandbox: SandboxState, namespace: str) -> bool:
    """Five fresh connections in a row through the Service answer as candle-vllm does."""
    url = "http://" + address_of(sandbox.run_dir, namespace, "clef-serve", 80)
    for _ in range(5):
        try:
            models = httpx.get(f"{url}/v1/models", timeout=5).json()["data"]
        except (httpx.HTTPError, ValueError, KeyError):
            return False
        if models[0].get("owned_by") != CANDLE_VLLM_OWNER:
            return False
    return True


def _pods(kube: Kube, namespace: str, app: str) -> dict[str, Any]:
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
    return {p.metadata.uid: p for p in pods if p.metadata.deletion_timestamp is None}


def _fail_every_third(sandbox: SandboxState, kube: Kube, namespace: str) -> None:
    """Every candidate pod's server answers every third generation with HTTP 500."""
    table = json.loads((sandbox.run_dir / "pod-ports.json").read_text())
    pods = _pods(kube, namespace, "clef-candle").values()
    assert pods
    for pod in pods:
        port = table[pod.status.pod_ip]["8080"]
        answer = httpx.post(f"http://127.0.0.1:{port}/debug/faults", json={"fail_every": 3})
        assert answer.status_code == 200, answer.text


def _in_background(spec: Path, env: dict[str, str]) -> tuple[threading.Thread, list[Any]]:
    result: list[CompletedProcess[str]] = []
    thread = threading.Thread(
        target=lambda: result.append(run_handoff(spec, env, "--auto-approve")), daemon=True
    )
    thread.start()
    return thread, result


def _until(what: str, check: Any, timeout_s: float, thread: threading.Thread) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        assert thread.is_alive(), f"the handoff ended before {what}"
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def test_a_candidate_failing_in_the_bake_goes_back_to_the_warm_pods(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = _bake_spec(sandbox, seeded, tmp_path, duration_s=120)
    old_pods = _pods(kube, seeded, "clef-serve")
    thread, result = _in_background(spec_file, handoff_env)

    def scaled() -> bool:
        ledger = parse_ledger(service(kube, seeded, "clef-serve").metadata.annotations)
        return ledger is not None and ledger.phase == "scaled"

    _until("the scale-up", scaled, 240, thread)
    # Once the proxy has applied the swap, clients that connect reach the candidate
    # (clients of before keep their connections to the old pods, which stay up): they
    # are the ones its failures meet. Sooner, the proxy may still send them to the old pods.
    _until(
        "new connections reaching the candidate",
        lambda: _new_connections_reach_candle(sandbox, seeded),
        60,
        thread,
    )
    with _clients(sandbox, seeded) as load:
        time.sleep(1.0)
        # Taken before the fault is set: a request started while it is being set meets it.
        fault_on = time.monotonic()
        _fail_every_third(sandbox, kube, seeded)
        back = _until(
            "the Service back on the old pods",
            lambda: service(kube, seeded, "clef-serve").spec.selector == OLD,
            BREACH_WITHIN_S,
            thread,
        )
        thread.join(timeout=240)
    assert result, "the handoff did not end"
    run = result[0]
    assert run.returncode != 0, run.stdout[-3000:]
    svc = service(kube, seeded, "clef-serve")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back", ledger
    assert "bake breached" in (ledger.cause or "") and "probe turns" in (ledger.cause or "")
    assert "back to the warm pods of Deployment clef-serve" in (ledger.cause or "")
    assert "no cold start" in run.stdout + run.stderr
    assert svc.spec.selector == OLD
    # No cold start: the very pods that served before still do, never restarted.
    now = _pods(kube, seeded, "clef-serve")
    assert set(now) == set(old_pods), (sorted(old_pods), sorted(now))
    assert all((p.status.container_statuses or [])[0].restart_count == 0 for p in now.values())
    assert kube.apps.read_namespaced_deployment("clef-candle", seeded).spec.replicas == 0
    # The clients met the candidate's failures, and only from the fault on until the
    # proxies had left it and its server had closed their kept-alive connections.
    record = history_entries(svc.metadata.annotations)[-1]
    window = [o for o in load.outcomes if fault_on <= o.started <= back + AFTER_RETURN_S]
    assert any(not o.ok for o in window), (len(load.outcomes), record["durations_s"])
    outside = [o for o in load.failed if o not in window]
    assert outside == [], (fault_on, back, len(load.failed), outside[:3], record["durations_s"])
    assert any(o.ok and o.started > back + AFTER_RETURN_S for o in load.outcomes)
    assert [s["name"] for s in record["steps"]][-2:] == ["bake", "rollback"], record["steps"]
    assert record["bake"]["verdict"] == "breach" and record["bake"]["restored_s"] < 5
