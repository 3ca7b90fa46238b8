"""The kubelet rides out a kube-apiserver outage: a pod that stops while the API server
is down still has its stop reported and its object removed once the server is back, as
a real kubelet's status manager retries until it is heard."""

from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client

from sandbox import controlplane, procs
from sandbox.state import SandboxState, write_state
from tests.kubelet.conftest import SandboxImages, SandboxKubelet
from tests.kubelet.test_prestop import delete_hooked_pod
from tests.kubelet.waits import wait_for


def test_a_pod_stopping_during_an_outage_is_removed_once_the_server_is_back(
    sandbox: SandboxState,
    core: client.CoreV1Api,
    namespace: str,
    kubelet: SandboxKubelet,
    images: SandboxImages,
    tmp_path: Path,
) -> None:
    assert sandbox.control_plane is not None, "the test needs the session's own control plane"
    started = tmp_path / "started"
    # The hook holds the stop until the server is down; the container then stops, and
    # the kubelet's status writes meet the outage.
    hook = ["sh", "-c", f"touch {started}; sleep 2"]
    server = delete_hooked_pod(
        core, namespace, kubelet, images, "stopping", hook=hook, started=started, grace_s=30
    )
    try:
        with controlplane.apiserver_outage(sandbox.control_plane):
            deadline = time.monotonic() + 20
            while procs.is_alive(server):
                assert time.monotonic() < deadline, "the server outlived its pod's stop"
                time.sleep(0.1)
            time.sleep(3)  # the kubelet tries to report the stop while nobody answers
    finally:
        write_state(sandbox)  # the new kube-apiserver is the one `sandbox down` stops
    wait_for(
        core.list_namespaced_pod,
        lambda pods: not pods,
        namespace=namespace,
        timeout_s=60,
        what="pod stopping removed by its kubelet after the API server came back",
    )
