"""Container processes live exactly as long as their pod and their kubelet: deleting a
pod stops its process and removes the object; a kubelet stopped by SIGTERM stops its
pods' processes, and one killed by SIGKILL leaves no model-server process behind; a
kubelet starting after a crash kills processes its predecessor recorded and restarts
its pods' containers as a rebooted node does."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from sandbox import procs
from sandbox.cluster import ClusterConfig, NodeConfig, load_cluster
from sandbox.kubelet import launch
from sandbox.kubelet.spawner import container_process, kill_leftovers
from tests.kubelet import objects
from tests.kubelet.conftest import SandboxImages, SandboxKubelet
from tests.kubelet.waits import is_ready, wait_for, wait_pod

EXIT_TIMEOUT_S = 10.0


def test_deleting_pod_stops_its_process(
    core: client.CoreV1Api, namespace: str, kubelet: SandboxKubelet, images: SandboxImages
) -> None:
    core.create_namespaced_pod(
        namespace, objects.pod("doomed", objects.pod_spec(objects.container(images.cadence)))
    )
    pod = wait_pod(core, namespace, "doomed", is_ready, timeout_s=60, what="Ready")
    record = _container_process(kubelet.run_dir, namespace, "doomed")
    assert procs.is_alive(record)
    core.delete_namespaced_pod("doomed", namespace)
    wait_for(
        core.list_namespaced_pod,
        lambda pods: not pods,
        namespace=namespace,
        timeout_s=30,
        what="pod doomed deleted by its kubelet",
    )
    assert not procs.is_alive(record)
    ports = json.loads((kubelet.run_dir / "pod-ports.json").read_text())
    assert pod.status.pod_ip not in ports
    logs = kubelet.run_dir / "kubelet" / "pods"
    assert not list(logs.glob(f"{namespace}_doomed_*")), "the pod's log directory outlived it"


@dataclass
class OwnKubelet:
    """A kubelet with a node of its own, so the sandbox's kubelet keeps running."""

    node: str
    run_dir: Path
    start: Callable[[], procs.ProcessRecord]


@pytest.fixture
def own_kubelet(
    core: client.CoreV1Api,
    namespace: str,
    sandbox,
    kubelet: SandboxKubelet,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> Iterator[OwnKubelet]:
    node = f"lifecycle-{uuid.uuid4().hex[:6]}"
    run_dir, started = tmp_path / "run", []

    def start() -> procs.ProcessRecord:
        started.append(
            launch.start(
                run_dir=run_dir,
                kubeconfig=kubelet.kubeconfig,
                cluster=_cluster_file(tmp_path, node),
                registry_url=kubelet.registry_url,
                pki=sandbox.run_dir / "pki",
            )
        )
        return started[-1]

    yield OwnKubelet(node, run_dir, start)
    for process in started:
        procs.stop(process)
    for pod in core.list_namespaced_pod(namespace).items:
        core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    core.delete_node(node)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_stopped_kubelet_leaves_no_model_server(
    signum: int,
    core: client.CoreV1Api,
    namespace: str,
    own_kubelet: OwnKubelet,
    images: SandboxImages,
) -> None:
    process = own_kubelet.start()
    spec = objects.pod_spec(objects.container(images.cadence), node_name=own_kubelet.node)
    core.create_namespaced_pod(namespace, objects.pod("served", spec))
    wait_pod(core, namespace, "served", is_ready, timeout_s=60, what="Ready")
    server = _container_process(own_kubelet.run_dir, namespace, "served")
    os.kill(process.pid, signum)
    _wait_dead(process, server)


@pytest.mark.slow
def test_restarted_kubelet_restarts_its_pods_containers(
    core: client.CoreV1Api, namespace: str, own_kubelet: OwnKubelet, images: SandboxImages
) -> None:
    """As after a node reboot: same pod IP, restartCount + 1, lastState exit 137."""
    first = own_kubelet.start()
    spec = objects.pod_spec(objects.container(images.cadence), node_name=own_kubelet.node)
    core.create_namespaced_pod(namespace, objects.pod("served", spec))
    before = wait_pod(core, namespace, "served", is_ready, timeout_s=60, what="Ready")
    os.kill(first.pid, signal.SIGKILL)
    _wait_dead(first)
    own_kubelet.start()
    after = wait_pod(
        core,
        namespace,
        "served",
        lambda p: is_ready(p) and p.status.container_statuses[0].restart_count == 1,
        timeout_s=60,
        what="Ready again after one restart",
    )
    assert after.status.pod_ip == before.status.pod_ip
    assert after.status.start_time == before.status.start_time
    assert after.status.container_statuses[0].last_state.terminated.exit_code == 137


def test_leftover_processes_are_killed_on_start(tmp_path: Path) -> None:
    records = tmp_path / "processes"
    records.mkdir()
    sleeper = procs.spawn(
        "leftover", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "leftover.log"
    )
    (records / f"{sleeper.pid}.json").write_text(sleeper.model_dump_json())
    killed = kill_leftovers(records)
    assert [r.pid for r in killed] == [sleeper.pid]
    _wait_dead(sleeper)
    assert not list(records.iterdir())


def _cluster_file(tmp_path: Path, node: str) -> Path:
    default = load_cluster()
    config = ClusterConfig(
        nodes=[NodeConfig(name=node)],
        time_scale=default.time_scale,
        pod_cidr="10.245.0.0/16",
        models=default.models,
    )
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    return path


def _container_process(run_dir: Path, namespace: str, pod: str) -> procs.ProcessRecord:
    """The recorded process of the pod's container (the kubelet keeps one file per process)."""
    record = container_process(run_dir, namespace, pod, "server")
    assert record is not None, f"no process recorded for {namespace}/{pod} under {run_dir}"
    return record


def _wait_dead(*records: procs.ProcessRecord) -> None:
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while time.monotonic() < deadline:
        for record in records:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(record.pid, os.WNOHANG)  # our own children must be reaped
        alive = [r.name for r in records if procs.is_alive(r)]
        if not alive:
            return
        time.sleep(0.05)
    raise AssertionError(f"still running {EXIT_TIMEOUT_S} s later: {alive}")
