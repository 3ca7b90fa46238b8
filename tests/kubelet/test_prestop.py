"""A container's preStop hook runs when its pod is deleted, before SIGTERM: the server
keeps running (and answering its open requests) until the hook ends. A hook that outlasts
the grace period is cut short and reported, and the pod still goes."""

from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client

from sandbox import procs
from tests.kubelet import objects
from tests.kubelet.conftest import SandboxImages, SandboxKubelet
from tests.kubelet.test_lifecycle import _container_process
from tests.kubelet.waits import is_ready, wait_for, wait_pod


def _pod_with_hook(name: str, image: str, command: list[str], *, grace_s: int) -> objects.Body:
    main = objects.container(image)
    main["lifecycle"] = {"preStop": {"exec": {"command": command}}}
    return objects.pod(name, objects.pod_spec(main, grace_s=grace_s))


def _wait_file(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} not written within {timeout_s} s"
        time.sleep(0.05)


def delete_hooked_pod(
    core: client.CoreV1Api,
    namespace: str,
    kubelet: SandboxKubelet,
    images: SandboxImages,
    name: str,
    *,
    hook: list[str],
    started: Path,
    grace_s: int,
) -> procs.ProcessRecord:
    """A Ready pod with `hook` as its preStop, deleted; its server's process once the
    hook (which must touch `started`) runs."""
    core.create_namespaced_pod(
        namespace, _pod_with_hook(name, images.cadence, hook, grace_s=grace_s)
    )
    wait_pod(core, namespace, name, is_ready, timeout_s=60, what="Ready")
    server = _container_process(kubelet.run_dir, namespace, name)
    core.delete_namespaced_pod(name, namespace)
    _wait_file(started, timeout_s=10)
    return server


def test_pre_stop_hook_runs_before_the_server_is_stopped(
    core: client.CoreV1Api,
    namespace: str,
    kubelet: SandboxKubelet,
    images: SandboxImages,
    tmp_path: Path,
) -> None:
    started, finished = tmp_path / "started", tmp_path / "finished"
    # the hook runs long enough that a slow look at it on a loaded machine is still in time
    hook = ["sh", "-c", f"touch {started}; sleep 8; touch {finished}"]
    server = delete_hooked_pod(
        core, namespace, kubelet, images, "hooked", hook=hook, started=started, grace_s=30
    )
    assert procs.is_alive(server), "the server was stopped while its preStop hook ran"
    deadline = time.monotonic() + 40
    while procs.is_alive(server):
        assert time.monotonic() < deadline, "the server outlived its pod's grace period"
        time.sleep(0.05)
    assert finished.exists(), "the server got SIGTERM before its preStop hook ended"
    wait_for(
        core.list_namespaced_pod,
        lambda pods: not pods,
        namespace=namespace,
        timeout_s=30,
        what="pod hooked deleted by its kubelet",
    )


def test_pre_stop_hook_past_the_grace_period_is_cut_and_reported(
    core: client.CoreV1Api, namespace: str, kubelet: SandboxKubelet, images: SandboxImages
) -> None:
    pod = _pod_with_hook("stuck", images.cadence, ["sleep", "60"], grace_s=2)
    core.create_namespaced_pod(namespace, pod)
    wait_pod(core, namespace, "stuck", is_ready, timeout_s=60, what="Ready")
    core.delete_namespaced_pod("stuck", namespace)
    wait_for(
        core.list_namespaced_pod,
        lambda pods: not pods,
        namespace=namespace,
        timeout_s=20,  # grace 2 s, then at least 2 s more for SIGTERM
        what="pod stuck deleted by its kubelet though its hook never ends",
    )
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=stuck")
    reasons = [e.reason for e in events.items]
    assert "FailedPreStopHook" in reasons, reasons
