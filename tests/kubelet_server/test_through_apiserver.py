"""Through the real apiserver, against pods the real kubelet runs: `kubectl logs`
returns the container's output, `--previous` the crashed run's (and the kubelet's own
refusal when there is none); the official Python client's port-forward (WebSocket)
reaches the pod's server; `kubectl port-forward` (SPDY) does too, for kubectl 1.20 and
for the system's newer kubectl, which first tries the WebSocket tunnel, is refused as a
1.20 kubelet refuses it, and falls back to SPDY."""

from __future__ import annotations

import http.client
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client
from kubernetes.stream import portforward

from sandbox.procs import free_port
from sandbox.simbuild import SimBuild
from sandbox.state import SandboxState
from tests.kubelet import objects
from tests.kubelet.waits import wait_pod
from tests.kubelet_server.cluster import (
    kubectls,
    push_server_image,
    require_components,
    scratch_namespace,
    start_server_pods,
)

POD, PORT = "web", 8080


@pytest.fixture(scope="module")
def namespace_with_pod(sandbox: SandboxState, kube_api: client.ApiClient) -> Iterator[str]:
    require_components(sandbox, "kubelet")
    core = client.CoreV1Api(kube_api)
    image = push_server_image(sandbox)
    with scratch_namespace(core, "kubelet-server") as namespace:
        start_server_pods(core, namespace, image, [POD])
        yield namespace


def _kubectl(binary: Path, sandbox: SandboxState, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [str(binary), "--kubeconfig", str(sandbox.kubeconfig), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("kubectl", kubectls(), ids=str)
def test_kubectl_logs(kubectl: Path, sandbox: SandboxState, namespace_with_pod: str) -> None:
    full = _kubectl(kubectl, sandbox, "-n", namespace_with_pod, "logs", POD)
    assert full.returncode == 0, full.stderr
    assert "listening on http://127.0.0.1:" in full.stdout
    tail = _kubectl(kubectl, sandbox, "-n", namespace_with_pod, "logs", POD, "--tail=1")
    after = _kubectl(kubectl, sandbox, "-n", namespace_with_pod, "logs", POD)
    assert len(tail.stdout.splitlines()) == 1 and tail.stdout in after.stdout
    previous = _kubectl(kubectl, sandbox, "-n", namespace_with_pod, "logs", POD, "--previous")
    assert previous.returncode != 0
    assert f'previous terminated container "server" in pod "{POD}" not found' in previous.stderr


def test_kubectl_logs_previous_shows_the_crashed_run(
    sandbox: SandboxState, kube_api: client.ApiClient, namespace_with_pod: str
) -> None:
    # A GPU container without runtimeClassName nvidia crashes at start on every run.
    image = push_server_image(sandbox, SimBuild(server="candle-vllm"))
    main = objects.container(image, gpus=1, args=objects.CODER_ARGS, readiness_path=None)
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace_with_pod, objects.pod("crash", objects.pod_spec(main)))
    wait_pod(
        core,
        namespace_with_pod,
        "crash",
        lambda p: (
            bool(p.status.container_statuses) and p.status.container_statuses[0].restart_count >= 1
        ),
        timeout_s=90,
        what="restartCount >= 1",
    )
    previous = _kubectl(kubectls()[0], sandbox, "-n", namespace_with_pod, "logs", "crash", "-p")
    assert previous.returncode == 0, previous.stderr
    assert "Unable to dynamically load the cuda shared library" in previous.stdout


def _model_ids(response_body: bytes) -> list[str]:
    return [model["id"] for model in json.loads(response_body)["data"]]


def test_python_client_port_forward(kube_api: client.ApiClient, namespace_with_pod: str) -> None:
    core = client.CoreV1Api(kube_api)
    forward = portforward(
        core.connect_get_namespaced_pod_portforward, POD, namespace_with_pod, ports=str(PORT)
    )
    connection = http.client.HTTPConnection("pod", PORT, timeout=10)
    connection.sock = forward.socket(PORT)
    connection.request("GET", "/v1/models")
    response = connection.getresponse()
    assert response.status == 200 and _model_ids(response.read()) == [POD]
    connection.close()
    assert forward.error(PORT) is None


@pytest.mark.parametrize("kubectl", kubectls(), ids=str)
def test_kubectl_port_forward(
    kubectl: Path, sandbox: SandboxState, namespace_with_pod: str
) -> None:
    local = free_port()
    argv = [str(kubectl), "--kubeconfig", str(sandbox.kubeconfig), "-n", namespace_with_pod]
    argv += ["port-forward", f"pod/{POD}", f"{local}:{PORT}", "--address", "127.0.0.1"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # empty if kubectl gave up
        if not first.startswith(f"Forwarding from 127.0.0.1:{local}"):
            process.terminate()
            pytest.fail(f"kubectl port-forward did not start: {process.communicate(timeout=10)}")
        for _ in range(2):  # two connections over the one upgraded connection
            response = httpx.get(f"http://127.0.0.1:{local}/v1/models", timeout=10, trust_env=False)
            assert response.status_code == 200 and _model_ids(response.content) == [POD]
    finally:
        process.terminate()
        process.wait(timeout=10)
