"""Approval in the real Prefect UI: a person opens the paused run in headless Chromium,
fills the handoff's approval form (approver, decision, reason) and submits; the flow
resumes with exactly that answer. A screenshot of the filled form is kept in artifacts/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.ui.browser import approve_in_ui, chromium
from tests.webhook.runs import by_name, state_of, wait_runs
from tests.webhook.servers import PrefectServer

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_the_approval_form_in_the_ui_resumes_the_flow(
    prefect: PrefectServer, tmp_path: Path, decision: str
) -> None:
    name = f"approval-{decision}-{uuid.uuid4().hex[:6]}"
    out = tmp_path / "answer.json"
    env = {**os.environ, "PREFECT_API_URL": prefect.api_url}
    flow = subprocess.Popen(
        [sys.executable, "-m", "tests.ui.approval_flow", name, str(out)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        [run] = wait_runs(
            prefect.api_url,
            lambda runs: bool(runs) and state_of(runs[0]) == "Paused",
            timeout_s=120,
            what=f"flow run {name} to pause",
            **by_name(name),
        )
        with chromium() as browser:
            shot = approve_in_ui(
                browser,
                f"{prefect.ui_url}/runs/flow-run/{run.id}",
                auth_string=prefect.auth_string,
                approver="Ada Lovelace",
                decision=decision,
                reason=f"{decision}: evidence abc123 reviewed",
                screenshot=f"approval-form-{decision}.png",
            )
        output, _ = flow.communicate(timeout=120)
    finally:
        flow.kill()
    assert flow.returncode == 0, output[-2000:]
    assert json.loads(out.read_text()) == {
        "approver": "Ada Lovelace",
        "decision": decision,
        "reason": f"{decision}: evidence abc123 reviewed",
        "signature": "",  # a spec that lists approvers needs `handoff approve --key`
    }
    wait_runs(
        prefect.api_url,
        lambda runs: state_of(runs[0]) == "Completed",
        timeout_s=30,
        what=f"{name} to complete",
        **by_name(name),
    )
    assert shot.stat().st_size > 10_000
