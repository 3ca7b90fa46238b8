"""Jobs in the sandbox: wait for one to end, read its pod."""

from __future__ import annotations

import time

from kubernetes import client

from flows.kube.client import Kube


def wait_job_end(kube: Kube, namespace: str, name: str, timeout_s: float = 120) -> client.V1Job:
    """The Job once its Complete or Failed condition is True (the Job controller's verdict)."""
    batch = client.BatchV1Api(kube.api)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = batch.read_namespaced_job_status(name, namespace)
        ended = {c.type for c in job.status.conditions or [] if c.status == "True"}
        if ended & {"Complete", "Failed"}:
            return job
        time.sleep(0.3)
    pods = job_pods(kube, namespace, name)
    raise AssertionError(
        f"Job {namespace}/{name} neither Complete nor Failed after {timeout_s:.0f} s: "
        f"{job.status}; pods: {[(p.metadata.name, p.status.phase) for p in pods]}"
    )


def job_pods(kube: Kube, namespace: str, name: str) -> list[client.V1Pod]:
    return kube.core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items


def exit_code(pod: client.V1Pod) -> int | None:
    state = pod.status.container_statuses[0].state
    return state.terminated.exit_code if state.terminated else None
