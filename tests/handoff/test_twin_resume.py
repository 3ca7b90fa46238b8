"""A twin handoff killed inside its retirement, after it removed the twin and before the
ledger says retired, is resumed by a rerun: the twin's absence is the handoff's own
deletion (the Service already narrowed to the live pods), not a person's, and the rerun
finishes the retirement and ends done, clients served throughout. Or it is rolled back
from there: the previous version runs as a twin again, the Service moves to it, and only
then does the live Deployment (Recreate) get its recorded spec back; the Service ends on
the restored live pods, clients served throughout and never two versions at once."""

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
from tests.world import (
    LEASE_S,
    await_phase,
    handoff_process,
    run_handoff,
    run_rollback,
    service,
    spec_in,
)

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
    spec_file = _spec(seeded, tmp_path)
    url = "http://" + address_of(sandbox.run_dir, seeded, SERVICE, 80)
    with ClientLoad(url, api=CLIENT_API[SERVICE], streams=4) as load:
        _killed_past_the_twins_removal(kube, seeded, spec_file, handoff_env)
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


def test_a_rollback_after_the_twins_removal_keeps_the_service_serving(
    sandbox: SandboxState,
    kube: Kube,
    seeded: str,
    spare_gpus: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
) -> None:
    spec_file = _spec(seeded, tmp_path)
    before = kube.apps.read_namespaced_deployment(LIVE, seeded).spec.template.spec.containers
    url = "http://" + address_of(sandbox.run_dir, seeded, SERVICE, 80)
    with ClientLoad(url, api=CLIENT_API[SERVICE], streams=4) as load:
        _killed_past_the_twins_removal(kube, seeded, spec_file, handoff_env)
        time.sleep(float(LEASE_S) + 2)  # the killed run's Lease lapses
        result = run_rollback(spec_file, handoff_env, "a person rolls it back", timeout_s=420)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    svc = service(kube, seeded, SERVICE)
    ledger = parse_ledger(svc.metadata.annotations or {})
    assert ledger is not None and ledger.phase == "rolled-back", ledger
    live = kube.apps.read_namespaced_deployment(LIVE, seeded)
    assert "handoff.dev/revision" not in (live.spec.template.metadata.labels or {})
    assert live.spec.template.spec.containers[0].args == before[0].args
    assert svc.spec.selector == ledger.snapshot.selector, svc.spec.selector
    # The invariant monitor (tests/handoff/conftest.py) saw endpoints throughout.
    assert load.succeeded > 0 and load.failed == [], load.failed[:3]


def _spec(namespace: str, tmp_path: Path) -> Path:
    # The latency gate is not under test here. It passes only what it shows within every
    # margin, and on a loaded 2-core machine an identical (or faster) candidate's p99 ITL
    # interval reached 1.42 at 1 stream and 3.7 at 16 (TPOT 1.10 at 16): wider margins let
    # the handoff be shown; tests/gates/latency/ test the gate's own defaults.
    margins = {"tpot": 1.25, "itl_p99": 5.0, "throughput": 0.8}
    return spec_in(
        namespace,
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


def _killed_past_the_twins_removal(
    kube: Kube, namespace: str, spec_file: Path, env: dict[str, str]
) -> None:
    """A twin handoff SIGKILLed once its twin is gone (the Service on the rewritten live
    pods alone), its ledger still `scaled`."""
    with handoff_process(spec_file, env, "--auto-approve") as process:
        await_phase(kube, namespace, SERVICE, "scaled", process, timeout_s=420)
        _await_twin_removed(kube, namespace, process)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    ledger = parse_ledger(service(kube, namespace, SERVICE).metadata.annotations or {})
    assert ledger is not None and ledger.phase == "scaled", ledger


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
