"""A twin handoff killed inside its retirement, after it removed the twin and before the
ledger says retired, is resumed by a rerun: the twin's absence is the handoff's own
deletion (the Service already narrowed to the live pods), not a person's, and the rerun
finishes the retirement and ends done, clients served throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from flows.render import TWIN_SUFFIX
from sandbox.proxy import address_of
from sandbox.seed import CLIENT_API
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.world import await_phase, handoff_process, run_handoff, service, spec_in

LIVE, SERVICE = "candle-vllm", "coder-predictor"

# A whole twin handoff, then a rerun that first waits out the killed run's Prefect slot.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_a_rerun_after_a_kill_past_the_twins_removal_ends_done(
    sandbox: SandboxState,
    kube: Kube,
    seeded: str,
    spare_gpus: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
) -> None:
    # The latency gate is not under test here. It passes only what it shows within every
    # margin, and on a loaded 2-core machine an identical (or faster) candidate's p99 ITL
    # interval reached 1.42 at 1 stream and 3.7 at 16 (TPOT 1.10 at 16): wider margins let
    # the handoff be shown; tests/gates/latency/ test the gate's own defaults.
    margins = {"tpot": 1.25, "itl_p99": 5.0, "throughput": 0.8}
    spec_file = spec_in(
        seeded,
        "coder-14b-fp16",
        tmp_path,
        gates={
            "latency": {
                "levels": [1],
                "slo": {"tpot_ms": 500, "ttft_ms": 10000},
                "margins": margins,
            }
        },
    )
    url = "http://" + address_of(sandbox.run_dir, seeded, SERVICE, 80)
    with ClientLoad(url, api=CLIENT_API[SERVICE], streams=4) as load:
        with handoff_process(spec_file, handoff_env, "--auto-approve") as process:
            await_phase(kube, seeded, SERVICE, "scaled", process, timeout_s=420)
            _await_twin_removed(kube, seeded, process)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        ledger = parse_ledger(service(kube, seeded, SERVICE).metadata.annotations or {})
        assert ledger is not None and ledger.phase == "scaled", ledger
        result = run_handoff(spec_file, handoff_env, "--auto-approve", timeout_s=420)
    out = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, out
    annotations = service(kube, seeded, SERVICE).metadata.annotations or {}
    ledger = parse_ledger(annotations)
    assert ledger is not None and ledger.phase == "done" and ledger.handoff_id, ledger
    assert [e["handoff_id"] for e in history_entries(annotations)][-1:] == [ledger.handoff_id]
    names = [d.metadata.name for d in kube.apps.list_namespaced_deployment(seeded).items]
    assert f"{LIVE}{TWIN_SUFFIX}" not in names
    live = kube.apps.read_namespaced_deployment(LIVE, seeded)
    assert live.spec.template.metadata.labels["handoff.dev/revision"] == ledger.revision
    assert load.succeeded > 0 and load.failed == [], load.failed[:3]


def _await_twin_removed(kube: Kube, namespace: str, process: subprocess.Popen[str]) -> None:
    """Until the twin Deployment is gone while the run still waits for its pods to stop."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        names = [d.metadata.name for d in kube.apps.list_namespaced_deployment(namespace).items]
        if f"{LIVE}{TWIN_SUFFIX}" not in names:
            return
        assert process.poll() is None, "the handoff ended before removing its twin"
        time.sleep(0.05)
    raise AssertionError("the twin was never removed")
