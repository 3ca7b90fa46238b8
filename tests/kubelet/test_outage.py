"""The kubelet rides out a kube-apiserver outage: a pod that stops while the API server
is down still has its stop reported and its object removed once the server is back, as
a real kubelet's status manager retries until it is heard; and a pod the node controller
marked not Ready while the kubelet was not heard is posted Ready again once it is, as the
status manager's reconcile does."""

from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client

from sandbox import controlplane, procs
from sandbox.state import SandboxState, write_state
from tests.kubelet import objects
from tests.kubelet.conftest import SandboxImages, SandboxKubelet
from tests.kubelet.test_prestop import delete_hooked_pod
from tests.kubelet.waits import is_ready, wait_for, wait_pod


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


def test_a_pod_marked_not_ready_by_the_node_controller_is_posted_ready_again(
    core: client.CoreV1Api,
    namespace: str,
    kubelet: SandboxKubelet,
    images: SandboxImages,
) -> None:
    # The node lifecycle controller writes Ready=False on the pods of a node whose
    # heartbeats it missed (an API server outage longer than its grace period does that
    # too); the containers never stopped being ready, so the kubelet must say so again.
    core.create_namespaced_pod(
        namespace, objects.pod("marked", objects.pod_spec(objects.container(images.cadence)))
    )
    wait_pod(core, namespace, "marked", is_ready, timeout_s=60, what="Ready")
    marked = {
        "type": "Ready",
        "status": "False",
        "reason": "NodeNotReady",
        "message": "the node's kubelet stopped posting status",
    }
    written = core.patch_namespaced_pod_status(
        "marked", namespace, {"status": {"conditions": [marked]}}
    )
    assert not is_ready(written)  # the kubelet may answer before a read would see it
    wait_pod(
        core, namespace, "marked", is_ready, timeout_s=20, what="Ready again, posted by the kubelet"
    )
