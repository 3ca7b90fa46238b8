"""One cell of the fault matrix: the clef-candle handoff (side by side) under client load,
a fault injected when the Service's ledger shows the run at a step, then the checks every
cell shares. Synchronised on the ledger (and, for the approval, on the paused flow run),
never on sleeps."""

from __future__ import annotations

import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from sandbox.proxy import address_of
from sandbox.publisher import publish
from sandbox.registry_front import RegistryFront
from sandbox.seed import CLIENT_API, ORG, World
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.faults.faults import CANDIDATE, LIVE, SERVICE, Fault, Scene
from tests.faults.watch import RouteWatch
from tests.handoff.pauses import IMPOSSIBLE, PausingRun
from tests.world import await_phase, run_handoff, spec_in, start_handoff

# The ledger phase at which the run is inside each step.
STEP_PHASE = {
    "image wait": "started",  # the tag is published only after the fault
    "warm": "applied",
    "gates": "warm",
    "approval wait": "gated",  # and the flow run paused
    "swap": "approved",
    "scale": "swapped",
    "retire": "scaled",
    "rollback": "rolling-back",  # the gates made to fail
}
STEPS = tuple(STEP_PHASE)
DONE, ROLLED_BACK, STOPPED = "done", "rolled-back", "stopped"


@dataclass(frozen=True)
class Cell:
    fault: str
    step: str
    inject: Fault
    outcomes: frozenset[str]  # what the run under the fault may end in
    cause: str | None = None  # words the recorded cause (or the error) must hold
    rerun: str = DONE  # what a rerun of the same spec converges to
    clients_may_fail: bool = False  # the fault itself takes the Service from clients
    service_gone: bool = False
    registry_front: bool = False  # the spec's images come through a RegistryFront
    image_timeout_s: float | None = None  # the spec's image.timeout_s, where it matters

    @property
    def key(self) -> str:
        return f"{self.fault} @ {self.step}"


@dataclass
class Result:
    fault: str
    step: str
    outcome: str
    rerun: str
    requests: int
    failed_requests: int
    converge_s: float
    notes: list[str] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "step": self.step,
            "outcome": self.outcome,
            "rerun": self.rerun,
            "requests": self.requests,
            "failed_requests": self.failed_requests,
            "converge_s": round(self.converge_s, 1),
        }


@dataclass
class Stage:
    sandbox: SandboxState
    kube: Kube
    namespace: str
    env: dict[str, str]
    world: World
    tmp: Path


def _spec(stage: Stage, cell: Cell) -> Path:
    # The latency gate at one level: the matrix is about faults, and cells stay short.
    changes: dict[str, Any] = {"gates": {"latency": {"levels": [1]}}}
    if cell.step == "image wait":  # a tag CI has not published yet: the run waits for it
        changes["image"] = {"tag": f"sm70-{uuid.uuid4().hex[:8]}"}
    if cell.image_timeout_s is not None:
        changes.setdefault("image", {})["timeout_s"] = cell.image_timeout_s
    if cell.step == "rollback":
        changes["gates"]["latency"].update(IMPOSSIBLE["latency"])
    return spec_in(stage.namespace, "clef-candle", stage.tmp, **changes)


def _ledger(kube: Kube, namespace: str) -> Any:
    return parse_ledger(
        kube.core.read_namespaced_service(SERVICE, namespace).metadata.annotations or {}
    )


def _service_exists(kube: Kube, namespace: str) -> bool:
    return any(
        s.metadata.name == SERVICE for s in kube.core.list_namespaced_service(namespace).items
    )


def run_cell(stage: Stage, cell: Cell) -> Result:
    """Run the cell; assert what every cell promises; return its figures."""
    front = RegistryFront(stage.world.registry_host) if cell.registry_front else nullcontext()
    with front:
        return _run_cell(stage, cell, front if isinstance(front, RegistryFront) else None)


def _run_cell(stage: Stage, cell: Cell, front: RegistryFront | None) -> Result:
    kube, ns = stage.kube, stage.namespace
    if front is not None:  # the run (and the rerun) reach the registry through the front
        world = stage.world.model_copy(update={"registry_url": front.url})
        stage = replace(stage, env={**stage.env, "HANDOFF_IMAGES": world.image_overrides()})
    spec_file = _spec(stage, cell)
    url = "http://" + address_of(stage.sandbox.run_dir, ns, SERVICE, 80)
    pausing = cell.step == "approval wait"
    with (
        ClientLoad(url, api=CLIENT_API[SERVICE], streams=4) as load,
        RouteWatch(kube, ns, SERVICE) as routes,
    ):
        if pausing:
            paused = PausingRun.start(spec_file, stage.env)
            process = paused.process
            paused.wait_paused()
        else:
            process = start_handoff(spec_file, stage.env, "--auto-approve")
            await_phase(kube, ns, SERVICE, STEP_PHASE[cell.step], process)
        injected = time.monotonic()
        try:
            kept = cell.inject(Scene(stage.sandbox, kube, ns, process, front))
            if cell.step == "image wait":
                publish_tag(stage, spec_file)
            if pausing and process.poll() is None:
                paused.answer(stage.env, "fault-matrix", "approved under a fault")
            output = _finish(process, paused.output if pausing else None)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        outcome = _outcome(kube, ns, cell, process.returncode)
        assert outcome in cell.outcomes, f"{cell.key}: ended {outcome}\n{output[-4000:]}"
        if cell.cause is not None:
            seen = output + (_cause(kube, ns) or "")
            assert cell.cause in seen, f"{cell.key}: no {cell.cause!r} in\n{output[-4000:]}"
        if kept is not None:  # before the rerun, which plans from the edit
            kept()
        rerun = _rerun(stage, spec_file, cell, outcome)
        converge_s = time.monotonic() - injected
    _check_service(kube, ns, cell, routes)
    if not cell.clients_may_fail:
        assert load.succeeded > 0 and load.failed == [], (cell.key, load.failed[:3])
    return Result(
        fault=cell.fault,
        step=cell.step,
        outcome=outcome,
        rerun=rerun,
        requests=len(load.outcomes),
        failed_requests=len(load.failed),
        converge_s=converge_s,
    )


def publish_tag(stage: Stage, spec_file: Path) -> None:
    """CI publishes the build holding the fix under the spec's tag."""
    import yaml

    tag = yaml.safe_load(spec_file.read_text())["image"]["tag"]
    publish(
        stage.world.registry_url,
        f"{ORG}/candle-vllm",
        tag,
        git_repo=stage.world.candle_vllm.path,
        commit="HEAD",
    )


def _finish(process: Any, drained: str | None, timeout_s: float = 420) -> str:
    if drained is not None:  # PausingRun reads the output itself
        process.wait(timeout=timeout_s)
        time.sleep(0.5)
        return drained
    output, _ = process.communicate(timeout=timeout_s)
    return output or ""


def _cause(kube: Kube, ns: str) -> str | None:
    if not _service_exists(kube, ns):
        return None
    ledger = _ledger(kube, ns)
    return ledger.cause if ledger else None


def _outcome(kube: Kube, ns: str, cell: Cell, code: int | None) -> str:
    """done / rolled-back as the ledger says; else the run stopped (killed, or refused)."""
    if not _service_exists(kube, ns):
        return STOPPED
    ledger = _ledger(kube, ns)
    phase = str(ledger.phase) if ledger else None
    if phase == DONE:
        assert code == 0, f"{cell.key}: ledger done but the run exited {code}"
        return DONE
    if phase == ROLLED_BACK:
        assert code != 0, f"{cell.key}: rolled back but the run exited 0"
        return ROLLED_BACK
    assert code != 0, f"{cell.key}: the run exited 0 at phase {phase}"
    return STOPPED


def _rerun(stage: Stage, spec_file: Path, cell: Cell, first: str) -> str:
    """The same spec run again converges: a stopped run is resumed, a rolled-back one
    (its fault gone) is done by the next; a done one needs none."""
    kube, ns = stage.kube, stage.namespace
    if first == DONE:
        return DONE
    result = run_handoff(spec_file, stage.env, "--auto-approve", timeout_s=420)
    output = result.stdout[-4000:] + result.stderr[-4000:]
    outcome = _outcome(kube, ns, cell, result.returncode)
    assert outcome == cell.rerun, f"{cell.key}: the rerun ended {outcome}\n{output}"
    if cell.service_gone:
        assert f"Service {ns}/{SERVICE}" in output and "not recreated" in output, output
    return outcome


def _check_service(kube: Kube, ns: str, cell: Cell, routes: RouteWatch) -> None:
    """One workload behind the Service throughout; the ledger and history agree; a
    deleted Service stays deleted."""
    bad = routes.not_one_workload()
    assert routes.samples and not bad, f"{cell.key}: Service routes {bad[:3]}"
    if cell.service_gone:  # never recreated; the Deployments put back as they were
        assert not _service_exists(kube, ns), f"{cell.key}: the Service was recreated"
        replicas = {
            d.metadata.name: d.spec.replicas for d in kube.apps.list_namespaced_deployment(ns).items
        }
        assert replicas[LIVE] == 1 and replicas.get(CANDIDATE, 0) == 0, (cell.key, replicas)
        return
    annotations = kube.core.read_namespaced_service(SERVICE, ns).metadata.annotations or {}
    ledger = parse_ledger(annotations)
    assert ledger is not None and str(ledger.phase) in (DONE, ROLLED_BACK), (cell.key, ledger)
    history = history_entries(annotations)
    ids = [e["handoff_id"] for e in history]
    assert len(ids) == len(set(ids)), f"{cell.key}: a handoff recorded twice: {ids}"
    assert history[-1]["handoff_id"] == ledger.handoff_id, (cell.key, history[-1], ledger)
    assert history[-1]["outcome"] == str(ledger.phase), (cell.key, history[-1], ledger)
    if str(ledger.phase) == DONE:
        svc = kube.core.read_namespaced_service(SERVICE, ns)
        assert svc.spec.selector.get("handoff.dev/revision") == ledger.revision
        assert kube.apps.read_namespaced_deployment(LIVE, ns).spec.replicas == 0
