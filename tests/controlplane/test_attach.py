"""Attach mode: the simulated nodes, proxy, registry and Prefect run against a control
plane the sandbox did not start, and `down` leaves that control plane running."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client, config

from sandbox import controlplane, manager, procs
from sandbox.seed import ORG, create_world

pytestmark = pytest.mark.timeout(240)


@pytest.mark.slow  # a second control plane beside the worker's
def test_attach_to_an_existing_control_plane(tmp_path: Path) -> None:
    plane = controlplane.start(tmp_path / "plane")
    try:
        state, started = manager.up(tmp_path / "attached", attach=plane.kubeconfig)
        try:
            assert started and state.control_plane is None
            api = config.new_client_from_config(config_file=str(plane.kubeconfig))
            nodes = {n.metadata.name for n in client.CoreV1Api(api).list_node().items}
            assert {"worker-1", "cpu-1"} <= nodes
            world = create_world(tmp_path / "src", state.registry_url or "")
            image = f"{world.registry_host}/{ORG}/clef-serve:pytorch"
            _deploy(api, image)
            assert _ready_within(api, 60)
            api.close()
        finally:
            stopped = manager.down(tmp_path / "attached")
        assert "kubelet" in stopped and "kube-apiserver" not in stopped
        assert plane.is_running()
    finally:
        controlplane.stop(plane)
    assert not any(procs.is_alive(p) for p in plane.processes)


def _deploy(api: client.ApiClient, image: str) -> None:
    labels = {"app": "attached"}
    client.AppsV1Api(api).create_namespaced_deployment(
        "default",
        {
            "metadata": {"name": "attached"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "nodeSelector": {"kubernetes.io/hostname": "cpu-1"},
                        "containers": [
                            {"name": "main", "image": image, "ports": [{"containerPort": 8080}]}
                        ],
                    },
                },
            },
        },
    )


def _ready_within(api: client.ApiClient, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        d = client.AppsV1Api(api).read_namespaced_deployment("attached", "default")
        if (d.status.ready_replicas or 0) >= 1:
            return True
        time.sleep(0.5)
    return False
