"""The swap waits for a ready candidate before it moves the Service: a candidate whose
readiness blips (a probe timing out under load) just as the person approves is not
switched to while it has no ready pod, and the handoff finishes once it is ready again,
with no client request failing."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from flows.kube.client import Kube
from flows.ledger import parse_ledger
from sandbox.kubelet.spawner import container_process
from sandbox.proxy import address_of
from sandbox.seed import CLIENT_API
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.handoff.pauses import PausingRun
from tests.kubelet.waits import is_ready
from tests.world import service, spec_in

HOLD_S = 10.0  # the candidate stays unready this long after the run records the approval


@contextmanager
def _stopped(kube: Kube, sandbox: SandboxState, namespace: str) -> Iterator[int]:
    """The candidate's container stopped (SIGSTOP) until it has gone NotReady; continued
    on the way out whatever happens."""
    pods = kube.core.list_namespaced_pod(namespace, label_selector="app=clef-candle").items
    assert len(pods) == 1, [p.metadata.name for p in pods]
    pod = pods[0].metadata.name
    record = container_process(sandbox.run_dir, namespace, pod, "candle")
    assert record is not None, f"no process recorded for {namespace}/{pod}/candle"
    pid = record.pid
    os.killpg(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 60
        while is_ready(kube.core.read_namespaced_pod(pod, namespace)):
            assert time.monotonic() < deadline, f"{pod} stayed Ready while stopped"
            time.sleep(0.2)
        yield pid
    finally:
        with suppress(ProcessLookupError):  # a rollback may have removed the pod
            os.killpg(pid, signal.SIGCONT)


def _phase(kube: Kube, namespace: str) -> str | None:
    ledger = parse_ledger(service(kube, namespace, "clef-serve").metadata.annotations or {})
    return ledger.phase if ledger else None


def _hold_unswitched(kube: Kube, namespace: str, run: PausingRun) -> None:
    """Once the run has recorded the approval (the swap comes next), the Service keeps
    its live selector for HOLD_S while the candidate has no ready pod."""
    deadline = time.monotonic() + 120
    while _phase(kube, namespace) != "approved":
        assert run.process.poll() is None, run.output[-3000:]
        assert time.monotonic() < deadline, "the run never recorded the approval"
        time.sleep(0.1)
    held_until = time.monotonic() + HOLD_S
    while time.monotonic() < held_until:
        selector = service(kube, namespace, "clef-serve").spec.selector
        assert selector.get("app") == "clef-serve", (
            f"the Service was switched to {selector} while the candidate had no ready pod"
        )
        time.sleep(0.1)


def test_an_approved_candidate_without_a_ready_pod_is_switched_to_only_once_ready(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates={"parity": None, "latency": None})
    url = "http://" + address_of(sandbox.run_dir, seeded, "clef-serve", 80)
    with ClientLoad(url, api=CLIENT_API["clef-serve"], streams=4) as load:
        run = PausingRun.start(spec_file, handoff_env)
        try:
            run.wait_paused()
            with _stopped(kube, sandbox, seeded):
                run.answer(handoff_env, "alice", "looks good")
                _hold_unswitched(kube, seeded, run)
            code = run.wait(timeout_s=240)
        finally:
            if run.process.poll() is None:
                run.process.kill()
    assert code == 0, run.output[-3000:]
    assert load.succeeded > 0 and load.failed == [], load.failed[:3]
    svc = service(kube, seeded, "clef-serve")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "done", ledger
    assert svc.spec.selector == {"app": "clef-candle", "handoff.dev/revision": ledger.revision}
