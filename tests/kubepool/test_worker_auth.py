"""manifests/rbac/prefect-worker.yaml's worker Deployment against a Prefect server that
requires credentials: the kubelet gives the worker PREFECT_API_URL from the prefect-api
ConfigMap and PREFECT_API_AUTH_STRING from the prefect-api-auth Secret; the worker polls
the pool with them and starts the flow run as a Job whose PREFECT_API_AUTH_STRING is a
reference to the same Secret (never its value), so the run reports its own state."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from flows.kube.client import Kube
from sandbox import flowimage
from sandbox.state import SandboxState
from tests.kubepool import pool
from tests.kubepool.jobs import exit_code, job_pods, wait_job_end
from tests.rbac.conftest import install_identity
from tests.webhook.servers import PrefectServer

WORKER_MANIFEST = pool.ROOT / "manifests" / "rbac" / "prefect-worker.yaml"
SHIPPED_NAMESPACE = "llm-serving"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a worker pod and one run, ~1 minute


def manifest_in(namespace: str) -> list[dict[str, Any]]:
    """The manifest's documents moved to namespace, the namespace its worker watches too."""
    text = WORKER_MANIFEST.read_text().replace(SHIPPED_NAMESPACE, namespace)
    return [d for d in yaml.safe_load_all(text) if d]


def runnable(deployment: dict[str, Any], image: str) -> dict[str, Any]:
    """The worker's Deployment as the sandbox runs it: the flow's image (this checkout's
    environment, which has prefect-kubernetes; Prefect's image cannot be pulled) and no
    health server (a flow-image process is not told the loopback port its container port
    maps to). Its env, where the credentials come from, is the manifest's."""
    deployment = copy.deepcopy(deployment)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    container["image"] = image
    container["command"].remove("--with-healthcheck")
    del container["livenessProbe"]
    container["env"].append({"name": "PREFECT_WORKER_QUERY_SECONDS", "value": "1"})
    return deployment


def _worker_log(kube: Kube, namespace: str) -> str:
    pods = kube.core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/name=prefect-worker"
    ).items
    logs = []
    for pod in pods:
        try:
            logs.append(kube.core.read_namespaced_pod_log(pod.metadata.name, namespace))
        except client.ApiException as exc:
            logs.append(f"{pod.metadata.name}: {pod.status.container_statuses} ({exc.reason})")
    return "\n".join(logs)[-4000:]


def test_the_in_cluster_worker_and_its_jobs_authenticate_with_a_secret(
    sandbox: SandboxState,
    kube: Kube,
    namespace: str,
    authed_prefect: PrefectServer,
    tmp_path: Path,
) -> None:
    api, auth = authed_prefect.api_url, authed_prefect.auth_string
    assert auth, "the server requires credentials"
    image = flowimage.publish(sandbox.registry_url or "")
    # The namespace's default account runs the flow here: no Role is installed for it.
    deployment_id = pool.deploy(api, image, auth=auth, service_account="default")

    # As the manifest's header has it: the ConfigMap and the Secret, then the manifest.
    kube.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "prefect-api"}, "data": {"PREFECT_API_URL": api}}
    )
    kube.core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "prefect-api-auth"}, "stringData": {"PREFECT_API_AUTH_STRING": auth}},
    )
    docs = manifest_in(namespace)
    # The worker's token Secret first: a pod of an account without one is refused.
    install_identity(
        sandbox,
        kube,
        namespace,
        [d for d in docs if d["kind"] != "Deployment"],
        tmp_path,
        account="prefect-worker",
    )
    (worker,) = [d for d in docs if d["kind"] == "Deployment"]
    client.AppsV1Api(kube.api).create_namespaced_deployment(namespace, runnable(worker, image))

    # The flow is refused its spec at once (a deployment's run reads only its specs
    # directory): a Failed state with the flow's own message is one the Job reported.
    parameters = {"spec_file": "/etc/hostname", "auto_approve": True}
    job_variables = {"namespace": namespace}
    run_id = pool.create_run(api, deployment_id, parameters, job_variables, auth=auth)
    log_note = tmp_path / "worker.log"
    log_note.write_text("the worker runs as a pod: its log follows\n")
    try:
        state = pool.wait_run(api, run_id, log_note, timeout_s=300, auth=auth)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nworker pod:\n{_worker_log(kube, namespace)}") from None

    (job,) = (
        client.BatchV1Api(kube.api)
        .list_namespaced_job(namespace, label_selector=f"prefect.io/flow-run-id={run_id}")
        .items
    )
    job = wait_job_end(kube, namespace, job.metadata.name)
    (pod,) = job_pods(kube, namespace, job.metadata.name)
    log = kube.core.read_namespaced_pod_log(pod.metadata.name, namespace)
    assert state.is_failed(), (state, log[-4000:])
    assert "refused, nothing read" in (state.message or ""), state
    assert (pod.status.phase, exit_code(pod)) == ("Succeeded", 0), log[-4000:]
    env = {e.name: e for e in job.spec.template.spec.containers[0].env}
    auth_env = env["PREFECT_API_AUTH_STRING"]
    assert auth_env.value is None, "the auth string is in the Job's manifest"
    ref = auth_env.value_from.secret_key_ref
    assert (ref.name, ref.key) == ("prefect-api-auth", "PREFECT_API_AUTH_STRING")
