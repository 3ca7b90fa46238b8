"""A Job of the flow's image runs in the sandbox as it would in a cluster: the Job
controller makes its pod, the kubelet runs the container as a process of this checkout
with the pod's ServiceAccount token and CA projected at
/var/run/secrets/kubernetes.io/serviceaccount (in the process's own mount namespace
only), the process loads in-cluster config and is held to manifests/rbac/'s Role, and
its exit code decides whether the Job completes or fails."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from flows.kube.client import Kube
from sandbox import flowimage
from sandbox.state import SandboxState
from tests.kubepool.jobs import exit_code, job_pods, wait_job_end
from tests.rbac.conftest import install_identity, rbac_documents, remove_cluster_objects

TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
# Lists pods (granted), tries Secrets (not granted), then exits with its argument.
PROBE = textwrap.dedent(
    """
    import os, sys
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    config.load_incluster_config()
    core = client.CoreV1Api()
    namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
    print("pods listed:", len(core.list_namespaced_pod(namespace).items))
    try:
        core.list_namespaced_secret(namespace)
        print("secrets: allowed")
    except ApiException as exc:
        print("secrets:", exc.status, exc.body)
    print("cwd:", os.getcwd(), "kubeconfig:", os.environ.get("KUBECONFIG"))
    sys.exit(int(sys.argv[1]))
    """
)


@pytest.fixture
def flow_account(
    sandbox: SandboxState, kube: Kube, namespace: str, tmp_path: Path
) -> Iterator[str]:
    """manifests/rbac/handoff.yaml in the test's namespace, its token Secret made."""
    install_identity(sandbox, kube, namespace, rbac_documents(namespace), tmp_path)
    yield "handoff"
    remove_cluster_objects(kube, namespace)


def _job(name: str, image: str, account: str, code: int) -> dict:  # type: ignore[type-arg]
    container = {"name": "flow", "image": image, "command": ["python", "-c", PROBE, str(code)]}
    return {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "serviceAccountName": account,
                    "restartPolicy": "Never",
                    "containers": [container],
                }
            },
        },
    }


def test_a_flow_image_job_runs_in_cluster_as_its_service_account(
    sandbox: SandboxState, kube: Kube, namespace: str, flow_account: str
) -> None:
    image = flowimage.publish(sandbox.registry_url or "")
    batch = client.BatchV1Api(kube.api)
    batch.create_namespaced_job(namespace, _job("probe-ok", image, flow_account, 0))
    batch.create_namespaced_job(namespace, _job("probe-fails", image, flow_account, 3))

    done = wait_job_end(kube, namespace, "probe-ok")
    assert done.status.succeeded == 1, done.status
    (pod,) = job_pods(kube, namespace, "probe-ok")
    assert pod.spec.service_account_name == "handoff"
    assert (pod.status.phase, exit_code(pod)) == ("Succeeded", 0)
    log = kube.core.read_namespaced_pod_log(pod.metadata.name, namespace)
    assert "pods listed: " in log, log
    assert "secrets: 403" in log, log
    assert f"system:serviceaccount:{namespace}:handoff" in log, log
    assert "cwd: /opt/handoff kubeconfig: None" in log, log

    failed = wait_job_end(kube, namespace, "probe-fails")
    assert failed.status.failed == 1 and not failed.status.succeeded, failed.status
    conditions = {c.type: c.reason for c in failed.status.conditions}
    assert conditions.get("Failed") == "BackoffLimitExceeded", conditions
    (pod,) = job_pods(kube, namespace, "probe-fails")
    assert (pod.status.phase, exit_code(pod)) == ("Failed", 3)

    # The token was mounted for the pod's process only, never on the machine.
    assert not TOKEN.exists()
