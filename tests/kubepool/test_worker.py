"""prefect.yaml's Kubernetes deployment, run for real in the sandbox: a Prefect
Kubernetes worker (prefect-kubernetes) with manifests/rbac/prefect-worker.yaml's
ServiceAccount polls the pool and starts each flow run as a Job; the kubelet runs the
flow's image as a process of this checkout with the pod's ServiceAccount token, and the
flow hands off a Service with in-cluster config as the shipped `handoff` identity. A run
that would bring another ServiceAccount or command is refused by Prefect before any Job
exists: the pool's template fixes them (flows/workpool.py)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from prefect.exceptions import PrefectHTTPStatusError

from flows.kube.client import Kube
from flows.kube.portforward import POD_ACCESS_ENV
from flows.ledger import history_entries, parse_ledger
from flows.spec_paths import SPECS_DIR_ENV
from sandbox import flowimage
from sandbox.state import SandboxState
from tests.handoff.pauses import RELAXED
from tests.kubepool import pool
from tests.kubepool.jobs import exit_code, job_pods, wait_job_end
from tests.rbac.conftest import install_identity, rbac_documents, remove_cluster_objects
from tests.world import LEASE_S, service, spec_in

WORKER_RBAC = pool.ROOT / "manifests" / "rbac" / "prefect-worker.yaml"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # a whole handoff, 2-4 minutes


def worker_documents(namespace: str) -> list[dict[str, Any]]:
    """The worker's ServiceAccount, Role and binding moved to namespace (its Deployment
    runs Prefect's image, which the sandbox cannot pull: the worker runs as a process)."""
    docs = [d for d in yaml.safe_load_all(WORKER_RBAC.read_text()) if d]
    docs = [d for d in docs if d["kind"] != "Deployment"]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
    return docs


@pytest.fixture
def identities(sandbox: SandboxState, kube: Kube, seeded: str, tmp_path: Path) -> Iterator[Path]:
    """The flow's and the worker's identities in the seeded namespace; the worker's
    kubeconfig."""
    install_identity(sandbox, kube, seeded, rbac_documents(seeded), tmp_path)
    docs = worker_documents(seeded)
    yield install_identity(sandbox, kube, seeded, docs, tmp_path, account="prefect-worker")
    remove_cluster_objects(kube, seeded)


def _job_of(kube: Kube, namespace: str, run_id: str) -> client.V1Job:
    jobs = client.BatchV1Api(kube.api).list_namespaced_job(
        namespace, label_selector=f"prefect.io/flow-run-id={run_id}"
    )
    assert len(jobs.items) == 1, [j.metadata.name for j in jobs.items]
    return jobs.items[0]


def _pod_log(kube: Kube, namespace: str, run_id: str) -> str:
    (pod,) = job_pods(kube, namespace, _job_of(kube, namespace, run_id).metadata.name)
    return str(kube.core.read_namespaced_pod_log(pod.metadata.name, namespace))


def test_a_handoff_runs_as_a_kubernetes_job_of_the_worker(
    sandbox: SandboxState,
    kube: Kube,
    seeded: str,
    identities: Path,
    spare_gpus: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
) -> None:
    api = sandbox.prefect_api_url or ""
    image = flowimage.publish(sandbox.registry_url or "")
    deployment = pool.deploy(api, image)
    # A deployment's run reads specs only from its specs directory.
    specs = tmp_path / "specs"
    specs.mkdir()
    spec_file = spec_in(seeded, "coder-14b-fp16", specs, gates=RELAXED)
    before = kube.apps.read_namespaced_deployment("candle-vllm", seeded).spec.template
    # What the flow needs beside its cluster: where the sources and images are.
    flow_env = {key: handoff_env[key] for key in ("HANDOFF_IMAGES", "CANDLE_VLLM_SOURCE")} | {
        "IMAGE_POLL_INTERVAL_S": "1",
        "HANDOFF_LEASE_S": LEASE_S,
        SPECS_DIR_ENV: str(specs),
        # The sandbox's pod IPs are never routed: reach the pods through the apiserver.
        POD_ACCESS_ENV: "port-forward",
    }
    parameters = {"spec_file": str(spec_file), "auto_approve": True}
    log = tmp_path / "worker.log"
    with pool.worker(api, identities, seeded, log):
        # What runs and as whom is the pool's: a run that would change it is refused
        # before any Job exists (Prefect checks job variables against the pool's schema).
        dies = "python -c 'import sys; sys.exit(3)'"
        for override in ({"service_account_name": "default"}, {"command": dies}):
            with pytest.raises(PrefectHTTPStatusError) as refused:
                pool.create_run(
                    api, deployment, parameters, {"namespace": seeded, "env": flow_env} | override
                )
            assert refused.value.response.status_code == 422, override
        assert not client.BatchV1Api(kube.api).list_namespaced_job(seeded).items

        # Then as the deployment has it: the handoff ServiceAccount.
        as_shipped = {"namespace": seeded, "env": flow_env}
        run_id = pool.create_run(api, deployment, parameters, as_shipped)
        state = pool.wait_run(api, run_id, log)
        assert state.is_completed(), (state.message, _pod_log(kube, seeded, run_id)[-6000:])

    job = wait_job_end(kube, seeded, _job_of(kube, seeded, run_id).metadata.name)
    assert job.status.succeeded == 1, job.status
    (pod,) = job_pods(kube, seeded, job.metadata.name)
    assert pod.spec.service_account_name == "handoff"
    assert (pod.status.phase, exit_code(pod)) == ("Succeeded", 0)
    assert pod.spec.containers[0].args == ["prefect", "flow-run", "execute"]
    # The run ran a clone of the repository's main (no merge named), not the image's tree.
    cloned = re.search(
        rf"checked out ([0-9a-f]{{40}}) of {pool.ROOT}", _pod_log(kube, seeded, run_id)
    )
    assert cloned, _pod_log(kube, seeded, run_id)[-3000:]
    ancestor = ["git", "-C", str(pool.ROOT), "merge-base", "--is-ancestor", cloned[1], "main"]
    assert subprocess.run(ancestor).returncode == 0, cloned[1]
    svc = service(kube, seeded, "coder-predictor")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and (ledger.strategy, ledger.phase) == ("side-by-side", "done")
    assert history_entries(svc.metadata.annotations)[-1]["outcome"] == "done"
    # The record names what ran: the clone's own code (not the image's copy), in the image.
    ran = history_entries(svc.metadata.annotations)[-1]["source"]
    assert Path(ran["code"]).name.startswith("handoff-main-"), ran  # the pull step's clone
    assert ran["image"] == image, ran
    after = kube.apps.read_namespaced_deployment("candle-vllm", seeded).spec.template
    assert after != before, "the live Deployment took the candidate's spec"
