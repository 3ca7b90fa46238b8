"""One cell of the fault matrix: a handoff under client load (clef-candle side by side, or
coder-14b-fp16 in place), a fault injected when the cluster shows the run at a step, then
the checks every cell shares. Synchronised on what the run writes (the Service's ledger,
its Prefect concurrency slot, the Deployments it changes; for the approval, the paused
flow run), never on sleeps."""

from __future__ import annotations

import subprocess
import time
import uuid
from contextlib import closing, nullcontext, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
from kubernetes.client.exceptions import ApiException

from flows.kube.client import Kube, connect
from flows.lease import read_holder
from flows.ledger import REVISION_LABEL, OutageRecord, history_entries, parse_ledger
from flows.slots import LEASE_S as SLOT_LEASE_S
from flows.slots import limit_name
from sandbox.prefect_server import own_headers
from sandbox.proxy import address_of
from sandbox.publisher import publish
from sandbox.registry_front import RegistryFront
from sandbox.seed import CLIENT_API, ORG, World
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.faults.faults import CANDIDATE, LIVE, SERVICE, Fault, Scene
from tests.faults.watch import OutageWatch, RouteWatch
from tests.handoff.pauses import IMPOSSIBLE, RELAXED, PausingRun
from tests.invariants import ServiceMonitor
from tests.world import await_phase, run_handoff, spec_in, start_handoff, watch_until

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
# Cells whose fault comes once the run has ended: the same spec run again.
ENDED = ("done", "rolled back")
DONE, ROLLED_BACK, STOPPED = "done", "rolled-back", "stopped"


@dataclass(frozen=True)
class Target:
    """The handoff a cell runs: its spec, its Service and the Deployments it moves."""

    spec: str
    service: str
    live: str
    candidate: str
    in_place: bool
    gates: dict[str, Any]
    candidate_changes: dict[str, Any] = field(default_factory=dict)  # to the spec's candidate
    spare_gpus: bool = True  # side by side: the spare GPU node uncordoned for the cell


# The latency gate at one level: the matrix is about faults, and cells stay short.
SIDE_BY_SIDE = Target("clef-candle", SERVICE, LIVE, CANDIDATE, False, {"latency": {"levels": [1]}})
# One GPU free: the TP=2 candidate replaces the live pods of candle-vllm in place.
IN_PLACE = Target(
    "coder-14b-fp16",
    "coder-predictor",
    "candle-vllm",
    "candle-vllm",
    True,
    {"latency": {**RELAXED["latency"], "levels": [1]}},
)


# A target that fits only once the old workload is gone (one GPU free beside the live pod,
# the spare node cordoned): warmed and gated at its preview size, it scales to 2 after
# the retirement. The gate's margins as tests/handoff/test_scale_after_retire.py sets them.
SCALE_AFTER_RETIRE = Target(
    "clef-candle",
    SERVICE,
    LIVE,
    CANDIDATE,
    False,
    {"latency": {"levels": [1], "margins": {"tpot": 1.25, "itl_p99": 5.0, "throughput": 0.8}}},
    candidate_changes={"replicas": 2},
    spare_gpus=False,
)


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
    target: Target = SIDE_BY_SIDE
    run_again: bool = False  # rerun even after done: a rerun of an ended run changes nothing
    # module:function where the run SIGKILLs itself as it is called (tests/handoff/
    # cancel_at.py): the fault lands in the step every time, where polling from outside
    # can miss a step that lasts a moment on a loaded machine
    at: str | None = None

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
    resends: int | None = None  # re-sent requests, where the traffic client counts them
    # In place: the longest stretch clients saw only failures, and the most declared.
    unavailable_s: float | None = None
    declared_s: float | None = None

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "fault": self.fault,
            "step": self.step,
            "outcome": self.outcome,
            "rerun": self.rerun,
            "requests": self.requests,
            "failed_requests": self.failed_requests,
            "resends": self.resends,
            "converge_s": round(self.converge_s, 1),
        }
        if self.declared_s is not None:
            row["unavailable_s"] = round(self.unavailable_s or 0.0, 1)
            row["declared_s"] = round(self.declared_s)
        return row


@dataclass
class Stage:
    sandbox: SandboxState
    kube: Kube
    namespace: str
    env: dict[str, str]
    world: World
    tmp: Path


def _spec(stage: Stage, cell: Cell) -> Path:
    changes: dict[str, Any] = {"gates": {k: dict(v) for k, v in cell.target.gates.items()}}
    if cell.target.candidate_changes:
        changes["candidate"] = dict(cell.target.candidate_changes)
    if cell.step == "image wait":  # a tag CI has not published yet: the run waits for it
        changes["image"] = {"tag": f"sm70-{uuid.uuid4().hex[:8]}"}
    if cell.image_timeout_s is not None:
        changes.setdefault("image", {})["timeout_s"] = cell.image_timeout_s
    if cell.step in ("rollback", "rolled back"):
        changes["gates"]["latency"].update(IMPOSSIBLE["latency"])
    return spec_in(stage.namespace, cell.target.spec, stage.tmp, **changes)


def _ledger(kube: Kube, namespace: str, service: str) -> Any:
    return parse_ledger(
        kube.core.read_namespaced_service(service, namespace).metadata.annotations or {}
    )


def _service_exists(kube: Kube, namespace: str, service: str) -> bool:
    return any(
        s.metadata.name == service for s in kube.core.list_namespaced_service(namespace).items
    )


# The steps without a ledger phase of their own, each recognised by what the run has
# just written as it enters them.


def _in_plan(stage: Stage, target: Target) -> bool:
    """The run holds its Service's Prefect slot, its turn: the plan is what it does next,
    and it has no Lease yet (the Lease is taken once the plan is made)."""
    if not _slot_taken(stage, target):
        return False
    holder = read_holder(stage.kube, stage.namespace, target.service)
    assert holder is None, f"the run held its Lease ({holder}) before its turn was seen"
    return True


def _stopping_old_pods(stage: Stage, target: Target) -> bool:
    """In place: the ledger records the outage's start (written as the old pods are told
    to stop) and not yet the candidate applied."""
    ledger = _ledger(stage.kube, stage.namespace, target.service)
    stopping = ("downtime-approved", "old-stopped")
    return ledger is not None and ledger.outage is not None and str(ledger.phase) in stopping


def _retiring_before_scale_up(stage: Stage, target: Target) -> bool:
    """The target fits only after retirement: the ledger still reads swapped and the
    live Deployment has been told to stop (its pods still hold their GPU)."""
    ledger = _ledger(stage.kube, stage.namespace, target.service)
    if ledger is None or str(ledger.phase) != "swapped":
        return False
    live = stage.kube.apps.read_namespaced_deployment(target.live, stage.namespace)
    return live.spec.replicas == 0


PROBES = {
    "plan": _in_plan,
    "in place: old pods stop": _stopping_old_pods,
    "retire before scale-up": _retiring_before_scale_up,
}


def _await_probe(stage: Stage, cell: Cell, process: subprocess.Popen[str]) -> None:
    probe = PROBES[cell.step]
    deadline = time.monotonic() + 420
    while True:
        with suppress(httpx.HTTPError, ApiException):
            if probe(stage, cell.target):
                return
        _still_running(process, cell, deadline)
        time.sleep(0.02)


def _still_running(process: subprocess.Popen[str], cell: Cell, deadline: float) -> None:
    if process.poll() is not None:
        output = process.stdout.read() if process.stdout else ""
        raise AssertionError(f"the handoff ended before reaching {cell.step}\n{output[-4000:]}")
    assert time.monotonic() < deadline, f"the handoff never reached {cell.step}"


def _await_candidate_applied(stage: Stage, cell: Cell, process: subprocess.Popen[str]) -> None:
    """Side by side: the candidate Deployment created at 0 replicas, seen on a watch (the
    apply records `applied` right after, and the warm-up scales it up)."""
    apps, ns, name = stage.kube.apps, stage.namespace, cell.target.candidate
    listed = apps.list_namespaced_deployment(ns, field_selector=f"metadata.name={name}")
    assert not listed.items, f"{cell.key}: {name} exists before the run"

    def created(kind: str, found: Any) -> bool:
        if kind != "ADDED":
            return False
        assert found.spec.replicas == 0, (cell.key, found.spec.replicas)
        return True

    watch_until(
        apps.list_namespaced_deployment, ns, name, created, process, cell.step, 420, listed=listed
    )


def _await_selector_switched(stage: Stage, cell: Cell, process: subprocess.Popen[str]) -> None:
    """The swap's wait: a watch sees the Service's selector switched to the candidate's
    revision while the ledger still says `approved` (the swap then waits for the routes
    to follow; the fault lands within that wait or, where the routes were quicker, in the
    scale-up right after)."""
    core, ns, name = stage.kube.core, stage.namespace, cell.target.service
    listed = core.list_namespaced_service(ns, field_selector=f"metadata.name={name}")

    def switched(kind: str, found: Any) -> bool:
        ledger = parse_ledger(found.metadata.annotations or {})
        if ledger is None or ledger.revision is None:
            return False
        if (found.spec.selector or {}).get(REVISION_LABEL) != ledger.revision:
            return False
        assert str(ledger.phase) == "approved", (cell.key, str(ledger.phase))
        return True

    watch_until(
        core.list_namespaced_service, ns, name, switched, process, cell.step, 420, listed=listed
    )


def _await_step(stage: Stage, cell: Cell, process: subprocess.Popen[str]) -> None:
    if cell.step in ENDED:
        return  # the run has ended: the fault is the run that follows
    if cell.step == "swap: routes wait":
        _await_selector_switched(stage, cell, process)
    elif cell.step == "apply":
        _await_candidate_applied(stage, cell, process)
    elif cell.step in PROBES:
        _await_probe(stage, cell, process)
    else:
        service = cell.target.service
        phase = STEP_PHASE[cell.step]
        await_phase(stage.kube, stage.namespace, service, phase, process, timeout_s=420)


@dataclass
class Seen:
    """What a cell has seen so far: the figures a failing cell's row still gives."""

    load: ClientLoad | None = None
    injected: float | None = None
    outcome: str | None = None
    rerun: str | None = None

    def figures(self) -> dict[str, Any]:
        load = self.load
        return {
            "outcome": self.outcome,
            "rerun": self.rerun,
            "requests": len(load.outcomes) if load else None,
            "failed_requests": len(load.failed) if load else None,
            "resends": resends(load) if load else None,
            "converge_s": None,  # it did not converge (or was not checked to)
        }


def resends(load: ClientLoad) -> int | None:
    """The traffic client's count of re-sent requests, where it keeps one."""
    value = getattr(load, "retried", None)
    return int(value) if value is not None else None


def run_cell(stage: Stage, cell: Cell, seen: Seen | None = None) -> Result:
    """Run the cell; assert what every cell promises; return its figures. `seen` is
    filled as the cell goes, for the row of a cell that fails."""
    front = RegistryFront(stage.world.registry_host) if cell.registry_front else nullcontext()
    with front:
        return _run_cell(
            stage, cell, front if isinstance(front, RegistryFront) else None, seen or Seen()
        )


def _run_cell(stage: Stage, cell: Cell, front: RegistryFront | None, seen: Seen) -> Result:
    kube, ns, target = stage.kube, stage.namespace, cell.target
    if front is not None:  # the run (and the rerun) reach the registry through the front
        world = stage.world.model_copy(update={"registry_url": front.url})
        stage = replace(stage, env={**stage.env, "HANDOFF_IMAGES": world.image_overrides()})
    spec_file = _spec(stage, cell)
    url = "http://" + address_of(stage.sandbox.run_dir, ns, target.service, 80)
    pausing = cell.step == "approval wait"
    with (
        ClientLoad(url, api=CLIENT_API[target.service], streams=4) as load,
        RouteWatch(kube, ns, target.service) as routes,
        OutageWatch(kube, ns, target.service) as outages,
        # The Service invariants (tests/invariants.py), read from its EndpointSlices.
        closing(connect(stage.sandbox.kubeconfig)) as monitor_kube,
        closing(ServiceMonitor(monitor_kube, ns, target.service).start()) as monitor,
    ):
        seen.load = load
        if pausing:
            paused = PausingRun.start(spec_file, stage.env)
            process = paused.process
            paused.wait_paused()
        else:
            process = start_handoff(spec_file, stage.env, "--auto-approve", at=cell.at)
        try:
            ended = _finish(process, None) if cell.step in ENDED else None
            if not pausing and cell.at is None:
                _await_step(stage, cell, process)
            injected = seen.injected = time.monotonic()
            kept = cell.inject(Scene(stage.sandbox, kube, ns, process, front))
            if cell.step == "image wait":
                publish_tag(stage, spec_file)
            if pausing and process.poll() is None:
                paused.answer(stage.env, "fault-matrix", "approved under a fault")
            output = ended if ended is not None else _finish(process, paused if pausing else None)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        outcome = seen.outcome = _outcome(kube, ns, cell, process.returncode)
        assert outcome in cell.outcomes, f"{cell.key}: ended {outcome}\n{output[-4000:]}"
        if cell.cause is not None:
            said = output + (_cause(kube, ns, target) or "")
            assert cell.cause in said, f"{cell.key}: no {cell.cause!r} in\n{output[-4000:]}"
        if kept is not None:  # before the rerun, which plans from the edit
            kept()
        rerun = seen.rerun = _rerun(stage, spec_file, cell, outcome)
        converge_s = time.monotonic() - injected
        time.sleep(1.0 if target.in_place else 0)  # clients see the Service served again
    windows = _declared_windows(cell, outages.records)
    _check_service(kube, ns, cell, routes, windows)
    if not cell.clients_may_fail:
        outside = [o for o in load.failed if not _inside(o.ended, windows)]
        assert load.succeeded > 0 and outside == [], (cell.key, outside[:3], windows)
        assert load.outcomes[-1].ok, f"{cell.key}: clients are not served at the end"
        assert not resends(load), f"{cell.key}: {resends(load)} requests were re-sent"
    _check_invariants(monitor, cell, windows)
    return Result(
        fault=cell.fault,
        step=cell.step,
        outcome=outcome,
        rerun=rerun,
        requests=len(load.outcomes),
        failed_requests=len(load.failed),
        converge_s=converge_s,
        resends=resends(load),
        unavailable_s=load.unavailable_s() if target.in_place else None,
        declared_s=max((o.bound_s for o in outages.records), default=None),
    )


def _check_invariants(monitor: ServiceMonitor, cell: Cell, windows: list[Window]) -> None:
    """I1-I3 on the Service's EndpointSlices: empty only inside the declared in-place
    outages, unless the fault itself takes the Service from clients."""
    if cell.clients_may_fail or cell.service_gone:
        monitor.allow_outage(f"the fault ({cell.fault}) takes the Service from its clients")
    monitor.allow_empty_during(windows, "in-place outage declared in the ledger")
    found = monitor.violations()
    assert not found, f"{cell.key}: " + monitor.report(found)


# A window of monotonic seconds in which the Service may have no ready workload.
Window = tuple[float, float]


def _declared_windows(cell: Cell, records: list[OutageRecord]) -> list[Window]:
    """In place, each outage the runs declared: from the old pods' stop for at most its
    declared bound (the rollback included). Side by side there is none."""
    if not cell.target.in_place:
        return []
    assert records, f"{cell.key}: an in-place run recorded no outage"
    offset = time.time() - time.monotonic()
    return [(r.started - offset, r.started - offset + r.bound_s) for r in records]


def _inside(at: float, windows: list[Window]) -> bool:
    return any(start <= at <= end for start, end in windows)


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


def _finish(process: Any, paused: PausingRun | None, timeout_s: float = 420) -> str:
    if paused is not None:  # PausingRun reads the output itself: read it once it ends
        process.wait(timeout=timeout_s)
        time.sleep(0.5)
        return paused.output
    output, _ = process.communicate(timeout=timeout_s)
    return output or ""


def _cause(kube: Kube, ns: str, target: Target) -> str | None:
    if not _service_exists(kube, ns, target.service):
        return None
    ledger = _ledger(kube, ns, target.service)
    return ledger.cause if ledger else None


def _outcome(kube: Kube, ns: str, cell: Cell, code: int | None) -> str:
    """done / rolled-back as the ledger says; else the run stopped (killed, or refused)."""
    if not _service_exists(kube, ns, cell.target.service):
        return STOPPED
    ledger = _ledger(kube, ns, cell.target.service)
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
    (its fault gone) is done by the next; a done one needs none, and where the cell runs
    it again all the same, it finds it done and writes nothing."""
    kube, ns = stage.kube, stage.namespace
    if first == DONE and not cell.run_again:
        return DONE
    if _service_exists(kube, ns, cell.target.service) and not _unfinished(stage, cell):
        _await_slot_free(stage, cell)
    before = _serving(stage, cell)
    result = run_handoff(spec_file, stage.env, "--auto-approve", timeout_s=420)
    output = result.stdout[-4000:] + result.stderr[-4000:]
    outcome = _outcome(kube, ns, cell, result.returncode)
    assert outcome == cell.rerun, f"{cell.key}: the rerun ended {outcome}\n{output}"
    if cell.run_again and outcome == first:  # converged already: nothing that serves moves
        after = _serving(stage, cell)
        if first == ROLLED_BACK:  # it tried the candidate again, and only the candidate
            before.pop(cell.target.candidate, None), after.pop(cell.target.candidate, None)
        assert after == before, f"{cell.key}: the rerun changed {before} into {after}"
    if cell.service_gone:
        assert f"Service {ns}/{cell.target.service}" in output and "not recreated" in output, output
    return outcome


def _serving(stage: Stage, cell: Cell) -> dict[str, Any]:
    """The Service's selector and each Deployment's resourceVersion: a write changes one."""
    kube, ns = stage.kube, stage.namespace
    found: dict[str, Any] = {
        d.metadata.name: d.metadata.resource_version
        for d in kube.apps.list_namespaced_deployment(ns).items
    }
    if _service_exists(kube, ns, cell.target.service):
        found["selector"] = kube.core.read_namespaced_service(cell.target.service, ns).spec.selector
    return found


def _unfinished(stage: Stage, cell: Cell) -> bool:
    ledger = _ledger(stage.kube, stage.namespace, cell.target.service)
    return ledger is not None and str(ledger.phase) not in (DONE, ROLLED_BACK)


def _await_slot_free(stage: Stage, cell: Cell) -> None:
    """A run killed before its ledger keeps its Service's Prefect slot until the slot's
    lease ends (flows/slots.py), and a run started by hand meanwhile is refused, naming
    the slot: the rerun starts once the slot is free, as a person told so would."""
    deadline = time.monotonic() + SLOT_LEASE_S + 60
    while _slot_taken(stage, cell.target):
        assert time.monotonic() < deadline, f"{cell.key}: its Prefect slot stayed taken"
        time.sleep(1)


def _slot_taken(stage: Stage, target: Target) -> bool:
    """Whether a run holds the Service's Prefect concurrency slot (flows/slots.py)."""
    api = stage.env["PREFECT_API_URL"]
    name = limit_name(stage.namespace, target.service)
    answer = httpx.get(f"{api}/v2/concurrency_limits/{name}", headers=own_headers(), timeout=30)
    return answer.status_code != 404 and bool(answer.json()["active_slots"])


def _check_service(
    kube: Kube, ns: str, cell: Cell, routes: RouteWatch, windows: list[Window]
) -> None:
    """One workload behind the Service throughout, or in place none only inside a
    declared outage; the ledger and history agree; a deleted Service stays deleted."""
    bad = [s for s in routes.not_one_workload() if s[1] or not _inside(s[0], windows)]
    assert routes.samples and not bad, f"{cell.key}: Service routes {bad[:3]}"
    if cell.service_gone:  # never recreated; the Deployments put back as they were
        assert not _service_exists(kube, ns, cell.target.service), (
            f"{cell.key}: the Service was recreated"
        )
        replicas = {
            d.metadata.name: d.spec.replicas for d in kube.apps.list_namespaced_deployment(ns).items
        }
        live, candidate = cell.target.live, cell.target.candidate
        assert replicas[live] == 1 and replicas.get(candidate, 0) == 0, (cell.key, replicas)
        return
    service = cell.target.service
    annotations = kube.core.read_namespaced_service(service, ns).metadata.annotations or {}
    ledger = parse_ledger(annotations)
    assert ledger is not None and str(ledger.phase) in (DONE, ROLLED_BACK), (cell.key, ledger)
    history = history_entries(annotations)
    ids = [e["handoff_id"] for e in history]
    assert len(ids) == len(set(ids)), f"{cell.key}: a handoff recorded twice: {ids}"
    # A run that found nothing to do records itself in the history only (changed: false).
    acted = [e for e in history if e.get("changed", True)]
    assert acted[-1]["handoff_id"] == ledger.handoff_id, (cell.key, acted[-1], ledger)
    assert acted[-1]["outcome"] == str(ledger.phase), (cell.key, acted[-1], ledger)
    assert history[-1]["outcome"] == str(ledger.phase), (cell.key, history[-1], ledger)
    if str(ledger.phase) == DONE:
        svc = kube.core.read_namespaced_service(service, ns)
        assert svc.spec.selector.get(REVISION_LABEL) == ledger.revision
        live = kube.apps.read_namespaced_deployment(cell.target.live, ns)
        if cell.target.in_place:  # the live Deployment runs the candidate now
            labels = live.spec.template.metadata.labels
            assert labels.get(REVISION_LABEL) == ledger.revision, (cell.key, labels)
        else:
            assert live.spec.replicas == 0
