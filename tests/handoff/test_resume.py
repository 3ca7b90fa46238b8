"""A handoff whose process is killed (SIGKILL) after apply, after the swap or after
scale-up is finished by running it again: the rerun reads the ledger on the Service,
waits out the dead run's Lease and converges, with the Service serving throughout."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from flows.kube.client import Kube
from flows.ledger import parse_ledger
from sandbox.proxy import address_of
from sandbox.seed import CLIENT_API
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.world import run_handoff, service, spec_in, start_handoff


def _kill_at(kube: Kube, namespace: str, process, phase: str, timeout_s: float = 240) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ledger = parse_ledger(service(kube, namespace, "clef-serve").metadata.annotations or {})
        if ledger is not None and ledger.phase == phase:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout else ""
            raise AssertionError(
                f"the handoff ended (exit {process.returncode}) before reaching {phase}:\n"
                + output[-4000:]
            )
        time.sleep(0.05)
    raise AssertionError(f"the handoff never reached {phase}")


# Three minutes each, so all behind the slow marker: in the default run the twin's kill
# and rerun (test_twin_resume.py) and each fault-matrix cell's rerun cover convergence.
@pytest.mark.slow
@pytest.mark.parametrize("phase", ["applied", "swapped", "scaled"])
def test_killed_handoff_converges_on_rerun(
    sandbox: SandboxState,
    kube: Kube,
    seeded: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
    phase: str,
) -> None:
    spec_file = spec_in(seeded, "clef-candle", tmp_path)
    url = "http://" + address_of(sandbox.run_dir, seeded, "clef-serve", 80)
    with ClientLoad(url, api=CLIENT_API["clef-serve"], streams=4) as load:
        first = start_handoff(spec_file, handoff_env, "--auto-approve")
        _kill_at(kube, seeded, first, phase)
        killed = parse_ledger(service(kube, seeded, "clef-serve").metadata.annotations)
        rerun = run_handoff(spec_file, handoff_env, "--auto-approve")
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert load.succeeded > 0 and load.failed == [], load.failed[:3]
    svc = service(kube, seeded, "clef-serve")
    ledger = parse_ledger(svc.metadata.annotations)
    assert killed is not None and ledger is not None
    assert ledger.phase == "done" and ledger.handoff_id == killed.handoff_id
    assert ledger.revision == killed.revision
    assert svc.spec.selector == {"app": "clef-candle", "handoff.dev/revision": ledger.revision}
    assert kube.apps.read_namespaced_deployment("clef-serve", seeded).spec.replicas == 0
