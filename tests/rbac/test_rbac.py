"""The flow's ServiceAccount (manifests/rbac/handoff.yaml) is enough for a whole handoff
on the sandbox and no more: with its token a real handoff plans, applies, warms, gates,
swaps and retires, while the apiserver answers 403 to reading Secrets, to deleting the
Service, and to anything in another namespace."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from tests.world import run_handoff, service, spec_in

# The latency SLO is not what these tests are about, and the machine is shared; an
# impossible one makes the gate fail after the candidate replaced the live pods, so
# the rollback (which puts the previous Deployment spec back whole) runs as well.
RELAXED_SLO = {"latency": {"slo": {"tpot_ms": 500, "ttft_ms": 10000}}}
IMPOSSIBLE_SLO = {"latency": {"slo": {"tpot_ms": 0.001, "ttft_ms": 10000}}}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("gates", "exit_code", "phase"),
    [(RELAXED_SLO, 0, "done"), (IMPOSSIBLE_SLO, 1, "rolled-back")],
    ids=["handed-off", "rolled-back"],
)
def test_a_whole_handoff_runs_as_the_flow_service_account(
    flow_identity: Path,
    kube: Kube,
    seeded: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
    gates: dict[str, Any],
    exit_code: int,
    phase: str,
) -> None:
    spec_file = spec_in(seeded, "coder-14b-fp16", tmp_path, gates=gates)
    before = kube.apps.read_namespaced_deployment("candle-vllm", seeded).spec.template
    env = {**handoff_env, "KUBECONFIG": str(flow_identity)}
    result = run_handoff(spec_file, env, "--auto-approve", "--kubeconfig", str(flow_identity))
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == exit_code, output
    assert "forbidden" not in output.lower(), output
    svc = service(kube, seeded, "coder-predictor")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == phase
    assert history_entries(svc.metadata.annotations)[-1]["outcome"] == phase
    after = kube.apps.read_namespaced_deployment("candle-vllm", seeded).spec.template
    assert (after == before) is (phase == "rolled-back")


def _forbidden(call: Callable[[], Any]) -> int:
    with pytest.raises(ApiException) as refused:
        call()
    return int(refused.value.status or 0)


def test_the_flow_service_account_cannot_read_secrets_or_leave_its_namespace(
    flow_identity: Path, seeded: str
) -> None:
    api = config.new_client_from_config(config_file=str(flow_identity))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    refusals = {
        "list Secrets": lambda: core.list_namespaced_secret(seeded),
        "read its own token Secret": lambda: core.read_namespaced_secret("handoff-token", seeded),
        "read ServiceAccounts": lambda: core.read_namespaced_service_account("handoff", seeded),
        "delete the Service": lambda: core.delete_namespaced_service("coder-predictor", seeded),
        "create a Service": lambda: core.create_namespaced_service(
            seeded, {"metadata": {"name": "x"}, "spec": {"ports": [{"port": 80}]}}
        ),
        "delete a Deployment": lambda: apps.delete_namespaced_deployment("candle-vllm", seeded),
        "list Services in default": lambda: core.list_namespaced_service("default"),
        "patch a Service in default": lambda: core.patch_namespaced_service(
            "kubernetes", "default", {"metadata": {"annotations": {"x": "y"}}}
        ),
        "read Deployments in kube-system": lambda: apps.list_namespaced_deployment("kube-system"),
        "read Secrets in kube-system": lambda: core.list_namespaced_secret("kube-system"),
        "delete a node": lambda: core.delete_node("worker-1"),
    }
    statuses = {what: _forbidden(call) for what, call in refusals.items()}
    api.close()
    assert statuses == dict.fromkeys(refusals, 403)
