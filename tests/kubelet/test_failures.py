"""The failures the seeds describe happen as on a real node: a missing image goes
ErrImagePull then ImagePullBackOff with the runtime's message, an image from another
registry is never dialled, a GPU container without ``runtimeClassName: nvidia`` reaches
Running and then crash-loops with a growing restartCount and the cudarc panic in its log,
and a fifth one-GPU pod on the four-GPU node stays Pending as Unschedulable."""

from __future__ import annotations

from collections.abc import Callable

from kubernetes import client

from sandbox.kubelet.command import requests_gpu
from tests.kubelet import objects
from tests.kubelet.conftest import SandboxImages, SandboxKubelet
from tests.kubelet.waits import restart_count, wait_for, wait_pod, waiting_reason

CUDA_PANIC = "Unable to dynamically load the cuda shared library"
GPU_NODE = "worker-1"


def test_missing_tag_goes_image_pull_backoff(
    core: client.CoreV1Api, namespace: str, kubelet: SandboxKubelet
) -> None:
    image = f"{kubelet.registry_host}/kubelet-tests/cadence:no-such-tag"
    pod = _run_until_waiting(core, namespace, "missing", image, "ImagePullBackOff")
    assert pod.status.container_statuses[0].state.waiting.message == (
        f'Back-off pulling image "{image}"'
    )
    reasons = _event_reasons(core, namespace, "missing")
    assert {"Pulling", "Failed", "BackOff"} <= reasons
    failed = [
        e.message
        for e in core.list_namespaced_event(namespace).items
        if e.reason == "Failed" and e.message.startswith("Failed to pull image")
    ]
    assert f"manifest for {image} not found: manifest unknown" in failed[0]


def test_other_registry_is_never_dialled(core: client.CoreV1Api, namespace: str) -> None:
    image = "forgejo.riotpiao.com/riotpiao-poimen/candle-vllm:sm70"
    pod = _run_until_waiting(core, namespace, "remote", image, "ErrImagePull")
    message = pod.status.container_statuses[0].state.waiting.message
    assert "lookup forgejo.riotpiao.com: no such host" in message


def test_gpu_pod_without_runtime_class_crash_loops(
    core: client.CoreV1Api, namespace: str, images: SandboxImages
) -> None:
    main = objects.container(images.candle, gpus=1, args=objects.CODER_ARGS)
    core.create_namespaced_pod(namespace, objects.pod("nocuda", objects.pod_spec(main)))
    pod = wait_pod(core, namespace, "nocuda", _restarted(3), timeout_s=60, what="restartCount >= 3")
    (container,) = pod.status.container_statuses
    terminated = container.last_state.terminated
    assert terminated.reason == "Error" and terminated.exit_code != 0
    assert pod.status.phase == "Running" and not container.ready
    crash_loop = wait_pod(
        core,
        namespace,
        "nocuda",
        lambda p: waiting_reason(p) == "CrashLoopBackOff",
        timeout_s=30,
        what="waiting CrashLoopBackOff",
    )
    assert crash_loop.status.container_statuses[0].state.waiting.message.startswith("back-off ")
    later = wait_pod(
        core,
        namespace,
        "nocuda",
        _restarted(container.restart_count + 1),
        timeout_s=60,
        what=f"restartCount > {container.restart_count}",
    )
    assert later.status.container_statuses[0].restart_count > container.restart_count
    log = core.read_namespaced_pod_log("nocuda", namespace, previous=True)
    assert CUDA_PANIC in log
    assert "BackOff" in _event_reasons(core, namespace, "nocuda")


def test_fifth_gpu_pod_stays_pending(
    core: client.CoreV1Api, namespace: str, images: SandboxImages
) -> None:
    _wait_gpus_free(core)
    main = objects.container(images.candle, gpus=1, args=objects.CODER_ARGS, readiness_path=None)
    spec = objects.pod_spec(main, runtime_class="nvidia")
    spec["nodeSelector"] = {"kubernetes.io/hostname": GPU_NODE}
    for i in range(5):
        core.create_namespaced_pod(namespace, objects.pod(f"gpu-{i}", spec))

    def settled(pods: list[client.V1Pod]) -> tuple[list, list] | None:
        bound = [p for p in pods if p.spec.node_name == GPU_NODE]
        pending = [p for p in pods if _unschedulable(p)]
        return (bound, pending) if len(bound) == 4 and len(pending) == 1 else None

    _, (pending,) = wait_for(
        core.list_namespaced_pod,
        settled,
        namespace=namespace,
        timeout_s=60,
        what="4 bound GPU pods and 1 Unschedulable",
    )
    assert pending.status.phase == "Pending"
    scheduled = next(c for c in pending.status.conditions if c.type == "PodScheduled")
    assert "Insufficient nvidia.com/gpu" in scheduled.message


def _run_until_waiting(
    core: client.CoreV1Api, namespace: str, name: str, image: str, reason: str
) -> client.V1Pod:
    spec = objects.pod_spec(objects.container(image))
    core.create_namespaced_pod(namespace, objects.pod(name, spec))
    return wait_pod(
        core,
        namespace,
        name,
        lambda p: waiting_reason(p) == reason,
        timeout_s=30,
        what=f"waiting {reason}",
    )


def _restarted(count: int) -> Callable[[client.V1Pod], bool]:
    return lambda pod: restart_count(pod) >= count


def _unschedulable(pod: client.V1Pod) -> bool:
    return any(
        c.type == "PodScheduled" and c.reason == "Unschedulable"
        for c in pod.status.conditions or []
    )


def _event_reasons(core: client.CoreV1Api, namespace: str, pod: str) -> set[str]:
    events = core.list_namespaced_event(namespace).items
    return {e.reason for e in events if e.involved_object.name == pod}


def _wait_gpus_free(core: client.CoreV1Api) -> None:
    """Earlier tests' GPU pods may still be terminating in namespaces being deleted."""

    def free(pods: list[client.V1Pod]) -> bool:
        on_node = [p for p in pods if p.spec.node_name == GPU_NODE]
        return not any(requests_gpu(c) for p in on_node for c in p.spec.containers)

    wait_for(
        core.list_pod_for_all_namespaces, free, timeout_s=60, what=f"no GPU pods left on {GPU_NODE}"
    )
