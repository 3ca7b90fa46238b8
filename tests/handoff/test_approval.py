"""Approval and exclusion, with the real Prefect server: a paused handoff holds its
Service (a second handoff is refused at once), a rejection rolls back and is recorded
with the approver, and an approval nobody gives in time rolls back too."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import httpx

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from tests.world import handoff_cli, run_handoff, service, spec_in, start_handoff

RUN_ID = re.compile(r"/runs/flow-run/([0-9a-f-]{36})")


def _paused_run_id(process: subprocess.Popen[str], api: str, timeout_s: float = 120) -> str:
    """Read the flow run's id from its output, then wait (Prefect's REST API) until it
    is paused."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    run_id = None
    while run_id is None and time.monotonic() < deadline:
        line = process.stdout.readline()
        assert line or process.poll() is None, "handoff exited before pausing"
        match = RUN_ID.search(line)
        run_id = match.group(1) if match else None
    assert run_id, "no flow run id printed"
    while time.monotonic() < deadline:
        state = httpx.get(f"{api}/flow_runs/{run_id}", timeout=10).json()["state"]
        if state["type"] == "PAUSED":
            return run_id
        time.sleep(0.5)
    raise AssertionError(f"flow run {run_id} never paused")


def test_paused_handoff_excludes_another_and_rejection_rolls_back(
    kube: Kube,
    seeded: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
) -> None:
    spec_file = spec_in(seeded, "coder-14b-fp16", tmp_path)
    first = start_handoff(spec_file, handoff_env)  # in place: pauses for the downtime
    try:
        run_id = _paused_run_id(first, handoff_env["PREFECT_API_URL"])
        second = run_handoff(spec_file, handoff_env, "--auto-approve", timeout_s=120)
        assert second.returncode != 0
        assert "is being handed off by" in second.stdout + second.stderr
        reject = subprocess.run(
            handoff_cli(
                "approve",
                run_id,
                "--approver",
                "alice",
                "--reject",
                "--reason",
                "not during office hours",
            ),
            env=handoff_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert reject.returncode == 0, reject.stdout + reject.stderr
        assert first.wait(timeout=180) != 0
    finally:
        if first.poll() is None:
            first.kill()
    svc = service(kube, seeded, "coder-predictor")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back"
    assert "rejected by alice: not during office hours" in (ledger.cause or "")
    assert svc.spec.selector == {"app": "candle-vllm"}
    deployment = kube.apps.read_namespaced_deployment("candle-vllm", seeded)
    assert "Qwen3-Coder-30B-A3B" in " ".join(deployment.spec.template.spec.containers[0].args)
    assert history_entries(svc.metadata.annotations)[-1]["outcome"] == "rolled-back"


def test_approval_timeout_rolls_back(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = spec_in(seeded, "coder-14b-fp16", tmp_path, approval={"timeout_s": 3})
    result = run_handoff(spec_file, handoff_env, timeout_s=240)
    assert result.returncode != 0
    ledger = parse_ledger(service(kube, seeded, "coder-predictor").metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back"
    assert "nobody approved within 3 s" in (ledger.cause or "")
