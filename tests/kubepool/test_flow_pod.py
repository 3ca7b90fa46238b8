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
from tests.kubelet.waits import wait_pod, waiting_reason
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


def _env_pod(name: str, image: str, env: list[dict]) -> dict:  # type: ignore[type-arg]
    show = "import os; print(sorted((k, v) for k, v in os.environ.items() if k.startswith('T_')))"
    container = {"name": "flow", "image": image, "command": ["python", "-c", show], "env": env}
    return {
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }


def test_a_flow_image_pod_takes_env_from_secrets_and_config_maps(
    sandbox: SandboxState, kube: Kube, namespace: str
) -> None:
    """The kubelet resolves env valueFrom from the API as a kubelet does: a Secret's or a
    ConfigMap's key, an optional one left unset; a missing one blocks the container."""
    image = flowimage.publish(sandbox.registry_url or "")
    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "creds"}, "stringData": {"auth": "user:pa ss"}}
    )
    kube.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "api"}, "data": {"url": "http://127.0.0.1:1/api"}}
    )
    env = [
        {"name": "T_AUTH", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "auth"}}},
        {"name": "T_URL", "valueFrom": {"configMapKeyRef": {"name": "api", "key": "url"}}},
        {"name": "T_PLAIN", "value": "x"},
        {
            "name": "T_OPTIONAL",
            "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": True}},
        },
    ]
    kube.core.create_namespaced_pod(namespace, _env_pod("env-ok", image, env))
    missing = [{"name": "T_KEY", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nokey"}}}]
    kube.core.create_namespaced_pod(namespace, _env_pod("env-missing", image, missing))

    done = wait_pod(
        kube.core,
        namespace,
        "env-ok",
        lambda p: p.status.phase in ("Succeeded", "Failed"),
        timeout_s=120,
        what="ended",
    )
    log = kube.core.read_namespaced_pod_log("env-ok", namespace)
    assert done.status.phase == "Succeeded", (done.status, log)
    expected = [("T_AUTH", "user:pa ss"), ("T_PLAIN", "x"), ("T_URL", "http://127.0.0.1:1/api")]
    assert log.strip() == str(expected), log

    blocked = wait_pod(
        kube.core,
        namespace,
        "env-missing",
        lambda p: waiting_reason(p) == "CreateContainerConfigError",
        timeout_s=120,
        what="CreateContainerConfigError",
    )
    message = blocked.status.container_statuses[0].state.waiting.message
    for part in ("env-missing", "container flow", "T_KEY", 'secret "creds"', '"nokey"'):
        assert part in message, message
