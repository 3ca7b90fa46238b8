"""A side-by-side handoff approved while a long generation runs on the old pods (minutes
of simulated time, seconds here) lets it finish: the old Deployment goes to 0 only after
it, no client request fails, the report names the drain's signal and wait, and the
history shows what going back to the retired workload would cost.

The live server gives running requests 5 s after SIGTERM and then aborts them (vLLM's
`--shutdown-timeout 5`; its default, 0, aborts at once), shorter than the long generation:
stopping the old pods before it ended would cut it, whatever the kubelet's grace period."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from flows.kube.client import Kube
from flows.kube.wait import wait_rolled_out
from flows.ledger import history_entries
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.handoff.pauses import PausingRun
from tests.handoff.test_drain import _start_long_chat, _url
from tests.world import handoff_report, service, spec_in, wait_until


def _scaled_to_zero_at(kube: Kube, namespace: str, name: str, stop: threading.Event) -> float:
    """When Deployment `name` was first seen at 0 replicas (polled every 0.1 s)."""
    while not stop.is_set():
        if kube.apps.read_namespaced_deployment(name, namespace).spec.replicas == 0:
            return time.monotonic()
        time.sleep(0.1)
    return float("inf")


def test_side_by_side_swap_during_a_long_generation_lets_it_finish(
    sandbox: SandboxState,
    kube: Kube,
    seeded: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
) -> None:
    live_server_aborts_after_sigterm(kube, seeded, "clef-serve", seconds=5)
    # The drain and the way back do not depend on the gates (smoke still runs).
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates={"parity": None, "latency": None})
    url = _url(sandbox, seeded, "clef-serve")
    run = PausingRun.start(spec_file, handoff_env)
    key = run.wait_paused(timeout_s=400)
    assert "The way back once retired" in run.description(key)
    stop = threading.Event()
    with (
        ThreadPoolExecutor(2) as pool,
        ClientLoad(url, api="chat", streams=2) as load,
    ):
        # On the old pods (the Service still selects them), for longer than the swap,
        # the candidate's scale-up and the proxies' settling take.
        future = _start_long_chat(pool, url, 20.0)
        retired = pool.submit(_scaled_to_zero_at, kube, seeded, "clef-serve", stop)
        run.answer(handoff_env, "ada", "the gates passed")
        code = run.wait(timeout_s=300)
        result, ended = future.result(timeout=60)
        stop.set()
        retired_at = retired.result(timeout=10)
    assert code == 0, run.output[-3000:]
    assert result.done and result.finish_reason == "length", result
    assert load.succeeded > 0 and load.failed == [], load.failed[:3]
    assert retired_at >= ended - 1.0, f"clef-serve scaled to 0 {ended - retired_at:.1f} s early"
    record = history_entries(service(kube, seeded, "clef-serve").metadata.annotations)[-1]
    (drained,) = [d for d in record["drains"] if d["workload"] == "clef-serve"]
    # The clients' kept-alive connections stay on the old pod after the swap (conntrack):
    # their short requests may keep it busy until the grace period; the long one ended.
    assert drained["signal"] == "vllm:num_requests_running", drained
    assert drained["waited_s"] > 1.0 and drained["bound_s"] == 30.0, drained
    (back,) = record["way_back"]
    assert back["workload"] == "clef-serve" and back["start_s"] > 0, back
    report = handoff_report(sandbox, record["flow_run_id"])
    assert "- drained before stopping: clef-serve (1 pod(s)): " in report, report
    assert "by vllm:num_requests_running" in report
    assert "- way back: clef-serve: about " in report
    shown = wait_until(
        lambda: _history(handoff_env, seeded, record["handoff_id"]),
        timeout_s=30,
        what="handoff history of the run",
    )
    assert "Drained:\n  clef-serve: " in shown and "by vllm:num_requests_running" in shown
    assert "Way back:\n  clef-serve: about " in shown, shown


def live_server_aborts_after_sigterm(
    kube: Kube, namespace: str, name: str, *, seconds: int
) -> None:
    """The Deployment's server started with `--shutdown-timeout seconds`, rolled out (its
    Recreate strategy empties the Service meanwhile: a declared setup outage)."""
    live = kube.apps.read_namespaced_deployment(name, namespace)
    (container,) = live.spec.template.spec.containers
    args = [*(container.args or []), "--shutdown-timeout", str(seconds)]
    kube.apps.patch_namespaced_deployment(
        name,
        namespace,
        {"spec": {"template": {"spec": {"containers": [{"name": container.name, "args": args}]}}}},
    )
    wait_rolled_out(kube, namespace, name, deadline_s=120)


def _history(env: dict[str, str], namespace: str, handoff_id: str) -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "cli", "history", "--namespace", namespace, handoff_id],
        env={**env, "PREFECT_API_URL": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return shown.stdout if shown.returncode == 0 else ""
