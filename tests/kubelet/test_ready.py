"""A pod of a known image runs like a real node's: the Deployment becomes Ready, the
Endpoints list the pod's bookkeeping IP, the status carries what a kubelet writes, and
the pod's port maps (pod-ports.json) to a 127.0.0.1 process that answers. Probes act as
a kubelet's do: a failing readiness probe keeps the pod unready, a failing liveness or
startup probe restarts the container."""

from __future__ import annotations

import ipaddress
import json

import httpx
from kubernetes import client

from sandbox.cluster import load_cluster
from tests.kubelet import objects
from tests.kubelet.conftest import SandboxImages, SandboxKubelet
from tests.kubelet.waits import is_ready, restart_count, wait_for, wait_pod


def test_deployment_becomes_ready_and_listed_in_endpoints(
    kube_api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    kubelet: SandboxKubelet,
    images: SandboxImages,
) -> None:
    apps = client.AppsV1Api(kube_api)
    apps.create_namespaced_deployment(
        namespace, objects.deployment("web", objects.pod_spec(objects.container(images.cadence)))
    )
    core.create_namespaced_service(namespace, objects.service("web", {"app": "web"}))

    def ready_pod(pods: list[client.V1Pod]) -> client.V1Pod | None:
        return next((p for p in pods if is_ready(p)), None)

    pod = wait_for(
        core.list_namespaced_pod,
        ready_pod,
        namespace=namespace,
        timeout_s=60,
        what="a Ready pod of Deployment web",
    )
    pod_ip = pod.status.pod_ip

    def listed(endpoints: list[client.V1Endpoints]) -> bool:
        return any(
            a.ip == pod_ip for e in endpoints for s in e.subsets or [] for a in s.addresses or []
        )

    wait_for(
        core.list_namespaced_endpoints,
        listed,
        namespace=namespace,
        timeout_s=30,
        what=f"Endpoints web listing {pod_ip}",
    )
    _assert_kubelet_status(pod, images.cadence, kubelet)
    local = json.loads((kubelet.run_dir / "pod-ports.json").read_text())[pod_ip][str(objects.PORT)]
    assert httpx.get(f"http://127.0.0.1:{local}/health", timeout=5).status_code == 200


def _assert_kubelet_status(pod: client.V1Pod, image: str, kubelet: SandboxKubelet) -> None:
    status = pod.status
    cidr = ipaddress.ip_network(load_cluster().pod_cidr)
    assert ipaddress.ip_address(status.pod_ip) in cidr
    assert status.host_ip == "127.0.0.1"
    assert status.phase == "Running" and status.start_time is not None
    assert {c.type for c in status.conditions} >= {
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
    }
    (container,) = status.container_statuses
    repository = image.rsplit(":", 1)[0]
    assert container.image == image
    assert container.image_id.startswith(f"docker-pullable://{repository}@sha256:")
    assert container.container_id.startswith("docker://")
    assert container.ready and container.started and container.restart_count == 0
    assert container.state.running is not None


def test_failing_readiness_probe_keeps_pod_unready(
    core: client.CoreV1Api, namespace: str, images: SandboxImages
) -> None:
    """Running but not Ready while its readiness probe answers 404, with Unhealthy events."""
    main = objects.container(images.cadence, readiness_path="/no-such-path")
    core.create_namespaced_pod(namespace, objects.pod("unready", objects.pod_spec(main)))

    answered = "Readiness probe failed: HTTP probe failed with statuscode: 404"

    def probed(events: list[client.CoreV1Event]) -> bool:
        # Until the server listens the probe is refused; then it answers 404.
        return any(e.reason == "Unhealthy" and e.message == answered for e in events)

    wait_for(
        core.list_namespaced_event,
        probed,
        namespace=namespace,
        timeout_s=60,
        what=f"an Unhealthy event {answered!r} for pod unready",
    )
    pod = core.read_namespaced_pod("unready", namespace)
    assert pod.status.phase == "Running" and not is_ready(pod)
    ready = next(c for c in pod.status.conditions if c.type == "Ready")
    assert ready.reason == "ContainersNotReady"
    assert ready.message == "containers with unready status: [server]"


def test_failing_liveness_and_startup_probes_restart_the_container(
    core: client.CoreV1Api, namespace: str, images: SandboxImages
) -> None:
    """Liveness on a missing path, and a startup budget shorter than clef-serve's cold start."""
    live = objects.container(images.cadence, readiness_path=None)
    live["livenessProbe"] = objects.probe("/no-such-path", failures=2)
    slow = objects.container(images.clef_serve, readiness_path=None)
    slow["startupProbe"] = objects.probe("/health", failures=2)
    for name, main in (("live", live), ("slow", slow)):
        core.create_namespaced_pod(namespace, objects.pod(name, objects.pod_spec(main)))
    for name, kind in (("live", "liveness"), ("slow", "startup")):
        restarted = wait_pod(
            core,
            namespace,
            name,
            lambda p: restart_count(p) >= 1,
            timeout_s=60,
            what="restarted once",
        )
        assert restarted.status.container_statuses[0].last_state.terminated is not None
        messages = [
            e.message
            for e in core.list_namespaced_event(namespace).items
            if e.involved_object.name == name and e.reason == "Killing"
        ]
        assert f"Container server failed {kind} probe, will be restarted" in messages
