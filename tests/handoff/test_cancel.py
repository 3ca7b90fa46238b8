"""A handoff stopped while it runs leaves the Service serving and the ledger finished.

Cancelled (SIGTERM, as a Prefect worker sends on a cancellation) in place, where the old
pods were already stopped, it rolls back before it exits: the previous spec comes back,
the Service serves again, the ledger ends rolled back instead of pointing at a
half-done step, and the history records it. Cancelled as soon as its ledger is written,
before any other change, it rolls back as well (with nothing to undo). Killed outright
in the middle of its rollback, the next run of the same spec finishes that rollback
instead of walking the handoff forward again."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest

from flows.kube.client import Kube
from flows.ledger import Ledger, history_entries, parse_ledger
from sandbox.state import SandboxState
from tests.handoff.cancel_at import cancelled_at
from tests.handoff.pauses import IMPOSSIBLE, RELAXED
from tests.webhook.slowproxy import slow_relay
from tests.world import (
    LEASE_S,
    await_phase,
    handoff_process,
    run_handoff,
    service,
    spec_in,
    wait_deployments_ready,
)

pytestmark = [
    pytest.mark.timeout(600),  # a whole handoff, on a shared machine
    pytest.mark.outage_window(
        "in place: the Service has no ready pod from the old pods' stop to the swap"
    ),
]


def _serves(kube: Kube, namespace: str) -> None:
    wait_deployments_ready(kube, namespace, ("candle-vllm",))
    endpoints = kube.core.read_namespaced_endpoints("coder-predictor", namespace)
    assert [a for s in endpoints.subsets or [] for a in s.addresses or []]


def test_sigterm_mid_handoff_rolls_back_and_the_service_serves_again(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = spec_in(seeded, "coder-14b-fp16", tmp_path, gates=RELAXED)
    before = kube.apps.read_namespaced_deployment("candle-vllm", seeded).spec.template
    ledger = _cancelled_at("applied", kube, seeded, "coder-predictor", spec_file, handoff_env)
    # The cause is the TerminationSignal, or what Prefect's task engine raised when the
    # signal cut into a task's own set-up: either way the run rolled back.
    assert ledger.cause, ledger
    after = kube.apps.read_namespaced_deployment("candle-vllm", seeded).spec.template
    assert after == before
    _serves(kube, seeded)


def test_sigterm_once_the_ledger_is_written_rolls_back(
    kube: Kube,
    seeded: str,
    handoff_env: dict[str, str],
    sandbox: SandboxState,
    spare_gpus: str,
    tmp_path: Path,
) -> None:
    """SIGTERM right after the ledger's first write is answered, before the first step
    (the run signals itself there, every time: tests/handoff/cancel_at.py), then SIGTERM as
    soon as the ledger says `started` (the run then waits for an image not published yet)
    with Prefect slow to create artifacts: each run rolls back. The first is held until
    the steps begin; raised where it came, it would end the run with the ledger written
    and nothing rolled back."""
    spec_file = spec_in(seeded, "clef-candle", tmp_path)
    at_once = subprocess.run(
        cancelled_at("flows.session:workload_names", "run", str(spec_file), "--auto-approve"),
        env=handoff_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    _rolled_back(kube, seeded, "clef-serve", at_once.returncode, at_once.stdout + at_once.stderr)
    tag = f"sm70-{uuid.uuid4().hex[:8]}"  # never published: the run waits for it
    spec_file = spec_in(seeded, "clef-candle", tmp_path, image={"tag": tag})
    port = urlparse(sandbox.prefect_api_url).port
    assert port is not None
    with slow_relay(port, marker="POST /api/artifacts/", delay_s=2.0) as relay:
        env = {**handoff_env, "PREFECT_API_URL": f"http://127.0.0.1:{relay}/api"}
        _cancelled_at("started", kube, seeded, "clef-serve", spec_file, env)


def _cancelled_at(
    phase: str, kube: Kube, namespace: str, name: str, spec_file: Path, env: dict[str, str]
) -> Ledger:
    """SIGTERM the run once Service `name`'s ledger is at `phase`."""
    with handoff_process(spec_file, env, "--auto-approve") as run:
        await_phase(kube, namespace, name, phase, run)
        os.kill(run.pid, signal.SIGTERM)
        output, _ = run.communicate(timeout=300)
    return _rolled_back(kube, namespace, name, run.returncode, output)


def _rolled_back(kube: Kube, namespace: str, name: str, code: int, output: str) -> Ledger:
    """The run failed, its ledger ended rolled back, and the history records it like any
    other handoff."""
    assert code != 0, output[-3000:]
    annotations = service(kube, namespace, name).metadata.annotations
    ledger = parse_ledger(annotations)
    assert ledger is not None and ledger.phase == "rolled-back", output[-3000:]
    entry = history_entries(annotations)[-1]
    assert entry["handoff_id"] == ledger.handoff_id and entry["outcome"] == "rolled-back"
    return ledger


@pytest.mark.slow  # a handoff, its gate failure and two rollbacks: 2-3 minutes
def test_a_run_killed_mid_rollback_is_finished_by_the_next_run(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = spec_in(seeded, "coder-14b-fp16", tmp_path, gates=IMPOSSIBLE)
    before = kube.apps.read_namespaced_deployment("candle-vllm", seeded).spec.template
    with handoff_process(spec_file, handoff_env, "--auto-approve") as run:
        await_phase(kube, seeded, "coder-predictor", "rolling-back", run)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    stopped = parse_ledger(service(kube, seeded, "coder-predictor").metadata.annotations)
    assert stopped is not None and stopped.phase == "rolling-back"
    time.sleep(float(LEASE_S) + 2)  # the killed run's Lease lapses
    result = run_handoff(spec_file, handoff_env, "--auto-approve")
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode != 0, output
    ledger = parse_ledger(service(kube, seeded, "coder-predictor").metadata.annotations)
    assert ledger is not None and ledger.handoff_id == stopped.handoff_id, output
    assert ledger.phase == "rolled-back" and ledger.cause == stopped.cause, output
    after = kube.apps.read_namespaced_deployment("candle-vllm", seeded).spec.template
    assert after == before
    _serves(kube, seeded)
