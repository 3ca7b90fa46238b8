"""The faults of the matrix, each injected once the run is at a step's boundary.

Substrate faults act on the sandbox's own processes (the control plane is the test
session's: only this suite kills it), on the registry's loopback front
(sandbox/registry_front.py) or on a node's kubelet (sandbox/kubelet/partition.py); a
person's edits are what kubectl would send.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flows.kube.client import Kube
from flows.ledger import parse_ledger
from sandbox import controlplane, prefect_server, procs
from sandbox.kubelet.partition import set_partitioned
from sandbox.registry_front import RegistryFront
from sandbox.state import SandboxState, write_state

LIVE, CANDIDATE, SERVICE = "clef-serve", "clef-candle", "clef-serve"


@dataclass
class Scene:
    """What a fault may act on."""

    sandbox: SandboxState
    kube: Kube
    namespace: str
    process: subprocess.Popen[str]
    front: RegistryFront | None = None  # the registry as the run reaches it, if fronted


# A fault may return a check to make once the run has ended: that a person's edit is
# still there (it must never be overwritten), or that the run did meet the fault.
Kept = Callable[[], None]
Fault = Callable[[Scene], Kept | None]


def sigkill(scene: Scene) -> None:
    os.killpg(scene.process.pid, signal.SIGKILL)
    scene.process.wait()


def killed_itself(scene: Scene) -> None:
    """The run SIGKILLed itself in the step (Cell.at): only its end is left to wait for."""
    scene.process.wait(timeout=300)


def sigterm(scene: Scene) -> None:
    """As a Prefect worker cancels a run: the flow rolls back before it exits."""
    os.kill(scene.process.pid, signal.SIGTERM)
    scene.process.wait(timeout=300)


def sigterm_then_sigkill(grace_s: float) -> Fault:
    """As a Prefect process worker cancels a run: SIGTERM, then SIGKILL to the whole
    process group once its grace period has passed (30 s by default), whether or not the
    rollback had finished."""

    def fault(scene: Scene) -> None:
        os.kill(scene.process.pid, signal.SIGTERM)
        try:
            scene.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(scene.process.pid, signal.SIGKILL)
            scene.process.wait()

    fault.__name__ = f"sigterm_then_sigkill_{grace_s:.0f}s"
    return fault


def node_cordoned_at_retirement(scene: Scene) -> None:
    """The GPU node is cordoned (maintenance) as the live pods are told to stop: the
    candidate's scale-up that needed the GPU they free cannot be scheduled, and the live
    workload the rollback restores cannot be either. The node is uncordoned 30 s into
    the rollback; the restore then finds the GPU."""
    core, ns = scene.kube.core, scene.namespace
    pods = core.list_namespaced_pod(ns, label_selector=f"app={LIVE}").items
    node = next(p.spec.node_name for p in pods if p.spec.node_name)
    core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        deadline = time.monotonic() + 420
        while scene.process.poll() is None and time.monotonic() < deadline:
            service = core.read_namespaced_service(SERVICE, ns)
            ledger = parse_ledger(service.metadata.annotations or {})
            if ledger is not None and str(ledger.phase) == "rolling-back":
                time.sleep(30)
                break
            time.sleep(0.2)
    finally:
        core.patch_node(node, {"spec": {"unschedulable": False}})


def nothing(scene: Scene) -> None:
    """No fault: the cell is the same spec run again after the run ended."""


def _plane(scene: Scene) -> controlplane.ControlPlane:
    assert scene.sandbox.control_plane is not None, "the suite needs its own control plane"
    return scene.sandbox.control_plane


@contextmanager
def _recorded(scene: Scene) -> Any:
    """A restarted process's new record is saved, so `sandbox down` stops it."""
    try:
        yield
    finally:
        write_state(scene.sandbox)


def apiserver_down(seconds: float) -> Fault:
    def fault(scene: Scene) -> None:
        with _recorded(scene), controlplane.apiserver_outage(_plane(scene)):
            time.sleep(seconds)

    fault.__name__ = f"apiserver_down_{seconds:.0f}s"
    return fault


def paused(name: str, seconds: float) -> Fault:
    """A control-plane process stopped (SIGSTOP) for `seconds`, then continued: its
    connections stay open, and a request in flight to it gets no answer meanwhile (the
    kube-apiserver's: held past the Lease, it is cut at the Lease's end by the fencing,
    and reaches etcd, if ever, only once the process continues)."""

    def fault(scene: Scene) -> None:
        process = next(p for p in _plane(scene).processes if p.name == name)
        os.kill(process.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(process.pid, signal.SIGCONT)

    fault.__name__ = f"{name.replace('-', '_')}_paused_{seconds:.0f}s"
    return fault


etcd_paused = paused("etcd", 5)


def prefect_restarted(scene: Scene) -> None:
    """The Prefect server stopped and started again on its port, with its database."""
    components = scene.sandbox.components
    index, record = next((i, p) for i, p in enumerate(components) if p.name == "prefect-server")
    api = scene.sandbox.prefect_api_url or ""
    port = int(api.rsplit(":", 1)[1].split("/")[0])
    with _recorded(scene):
        procs.stop(record)
        components[index], _ = prefect_server.spawn(scene.sandbox.run_dir, port)
    prefect_server.wait_healthy(components[index], api)


def _scale_by_person(scene: Scene, name: str) -> Kept:
    """A person adds a replica to Deployment `name` (kubectl scale)."""
    apps, ns = scene.kube.apps, scene.namespace
    wanted = apps.read_namespaced_deployment(name, ns).spec.replicas + 1
    apps.patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": wanted}})

    def kept() -> None:
        found = apps.read_namespaced_deployment(name, ns).spec.replicas
        assert found == wanted, f"the person's {wanted} replicas of {name} became {found}"

    return kept


def scale_live(scene: Scene) -> Kept:
    """A person adds a replica to the live Deployment."""
    return _scale_by_person(scene, LIVE)


def scale_candidate(scene: Scene) -> Kept:
    """A person adds a replica to the candidate while it is gated."""
    return _scale_by_person(scene, CANDIDATE)


def edit_selector(scene: Scene) -> Kept:
    """A person narrows the Service to the live pods' current ReplicaSet: it still
    serves, from a selector the handoff did not write."""
    pods = scene.kube.core.list_namespaced_pod(scene.namespace, label_selector=f"app={LIVE}")
    wanted = {"app": LIVE, "pod-template-hash": pods.items[0].metadata.labels["pod-template-hash"]}
    core, ns = scene.kube.core, scene.namespace
    # The whole selector replaced, as `kubectl edit` does: a merge patch would keep the
    # keys the handoff added (its revision), and the Service would select nothing.
    now = core.read_namespaced_service(SERVICE, ns).spec.selector or {}
    dropped = {key: None for key in now if key not in wanted}
    core.patch_namespaced_service(SERVICE, ns, {"spec": {"selector": {**dropped, **wanted}}})

    def kept() -> None:
        found = core.read_namespaced_service(SERVICE, ns).spec.selector
        assert found == wanted, f"the person's selector {wanted} became {found}"

    return kept


def delete_candidate(scene: Scene) -> None:
    scene.kube.apps.delete_namespaced_deployment(CANDIDATE, scene.namespace)


def delete_service(scene: Scene) -> None:
    # Unparsed: 1.20 answers a Service's delete with a Status the client cannot read.
    scene.kube.core.delete_namespaced_service(SERVICE, scene.namespace, _preload_content=False)


def kill_candidate_pod(scene: Scene) -> None:
    """The candidate's pod deleted at once (grace 0), as a node losing it would."""
    pods = scene.kube.core.list_namespaced_pod(scene.namespace, label_selector=f"app={CANDIDATE}")
    for pod in pods.items:
        scene.kube.core.delete_namespaced_pod(
            pod.metadata.name, scene.namespace, grace_period_seconds=0
        )


def _front(scene: Scene) -> RegistryFront:
    assert scene.front is not None, "a registry fault needs the cell's registry_front"
    return scene.front


def _registry_was_faulty(front: RegistryFront) -> Kept:
    """The run met both faults: 503s, and requests left hanging."""

    def kept() -> None:
        assert front.answered_503 > 0 and front.held > 0, (front.answered_503, front.held)

    return kept


# A hang outlasts the registry client's 10 s request timeout, so the run meets a timeout.
REGISTRY_503_S, REGISTRY_HANG_S = 6.0, 14.0


def registry_unavailable_recovering(scene: Scene) -> Kept:
    """The registry answers 503, then not at all, then recovers within the image wait."""
    front = _front(scene)
    front.switch("unavailable")
    time.sleep(REGISTRY_503_S)
    front.switch("hang")
    time.sleep(REGISTRY_HANG_S)
    front.switch("pass")
    return _registry_was_faulty(front)


def registry_unavailable_past_timeout(scene: Scene) -> Kept:
    """The registry answers 503, then not at all, until the run has given up waiting
    (its image timeout is short); it recovers afterwards, before the rerun."""
    front = _front(scene)
    front.switch("unavailable")
    time.sleep(REGISTRY_503_S)
    front.switch("hang")
    try:
        scene.process.wait(timeout=300)
    finally:
        front.switch("pass")
    candidate = [
        d.metadata.name
        for d in scene.kube.apps.list_namespaced_deployment(scene.namespace).items
        if d.metadata.name == CANDIDATE
    ]
    assert not candidate, f"{CANDIDATE} was applied although the image was never seen"
    return _registry_was_faulty(front)


def _bound_candidate_pod(scene: Scene, timeout_s: float = 120) -> tuple[str, str]:
    """(pod, node) as soon as the scheduler has bound the candidate's pod."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pods = scene.kube.core.list_namespaced_pod(
            scene.namespace, label_selector=f"app={CANDIDATE}"
        ).items
        bound = [p for p in pods if p.spec.node_name]
        if bound:
            return bound[0].metadata.name, bound[0].spec.node_name
        assert scene.process.poll() is None, "the run ended before the candidate was bound"
        time.sleep(0.05)
    raise AssertionError(f"no pod of {CANDIDATE} was bound within {timeout_s} s")


def _node_ready(scene: Scene, node: str) -> bool:
    conditions = scene.kube.core.read_node(node).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def candidate_node_lost(scene: Scene) -> None:
    """The GPU node the candidate's pod was just bound to loses its kubelet (no heartbeat,
    no pod status: sandbox/kubelet/partition.py) until the run has ended; the node
    controller marks it NotReady after its grace period. Back and Ready before the rerun."""
    pod, node = _bound_candidate_pod(scene)
    core, ns = scene.kube.core, scene.namespace
    live = {
        p.spec.node_name for p in core.list_namespaced_pod(ns, label_selector=f"app={LIVE}").items
    }
    assert node not in live, f"{pod} shares node {node} with the live pods: not this cell's case"
    kubelet_dir = scene.sandbox.run_dir / "kubelet"
    set_partitioned(kubelet_dir, node, True)
    try:
        status = core.read_namespaced_pod_status(pod, ns).status
        ready = [c.status for c in status.conditions or [] if c.type == "Ready"]
        assert ready != ["True"], f"{pod} was Ready before its node was cut off: too late"
        scene.process.wait(timeout=300)
    finally:
        set_partitioned(kubelet_dir, node, False)
    deadline = time.monotonic() + 60
    while not _node_ready(scene, node):
        assert time.monotonic() < deadline, f"node {node} not Ready 60 s after it was healed"
        time.sleep(0.5)
