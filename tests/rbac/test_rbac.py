"""The flow's ServiceAccount (manifests/rbac/handoff.yaml) is enough for every handoff
shape and every rollback on the sandbox, and no more: with its token real handoffs go
side by side, through a twin and in place, and each rolls back, while the apiserver
answers 403 to reading Secrets, to deleting the Service or a live Deployment, and to
anything in another namespace. A grant that is missing stops the handoff at plan time
(every write is dry-run first) with nothing changed; one revoked mid-handoff still
ends the ledger rolled back, with the write that failed named."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from flows.kube.client import Kube
from flows.ledger import ANNOTATION, history_entries, parse_ledger
from flows.render import TWIN_SUFFIX
from sandbox.state import SandboxState
from tests.handoff.pauses import IMPOSSIBLE, RELAXED
from tests.rbac.conftest import install_identity, rbac_documents, remove_cluster_objects
from tests.world import await_phase, handoff_process, run_handoff, service, spec_in

pytestmark = pytest.mark.timeout(600)  # a whole handoff, on a shared machine

# The latency SLO is not what these tests are about and the machine is shared: it is
# relaxed, or made impossible so that the gate fails once the candidate is warm and the
# rollback (in place: the previous Deployment spec put back whole) runs as well.
PASSING = {"gates": RELAXED}
# A missed SLO is never certain before the last look: three rounds reach it sooner.
FAILING = {"gates": {"latency": {**IMPOSSIBLE["latency"], "rounds": 3}}}
# The last build without the fix: the parity gate fails.
WRONG_ANSWERS = {"image": {"tag": "sm70-nofix", "requires": []}}

CLEF = ("clef-candle", "clef-serve", "clef-serve", {"app": "clef-serve"})
CODER = ("coder-14b-fp16", "coder-predictor", "candle-vllm", {"app": "candle-vllm"})
SHAPES = {
    # id: (spec, service, live Deployment, selector before; changes; spare GPUs; strategy, phase)
    "side-by-side": (CLEF, {}, False, "side-by-side", "done"),
    "side-by-side-rolled-back": (CLEF, WRONG_ANSWERS, False, "side-by-side", "rolled-back"),
    "twin": (CODER, PASSING, True, "side-by-side", "done"),
    "twin-rolled-back": (CODER, FAILING, True, "side-by-side", "rolled-back"),
    "in-place": (CODER, PASSING, False, "in-place", "done"),
    "in-place-rolled-back": (CODER, FAILING, False, "in-place", "rolled-back"),
}
# The twin's rollback runs by default (test_twin.py runs a twin to the end); the others
# behind the slow marker.
SLOW = {"side-by-side", "side-by-side-rolled-back", "twin", "in-place", "in-place-rolled-back"}


@pytest.mark.parametrize(
    "shape", [pytest.param(s, marks=[pytest.mark.slow] if s in SLOW else []) for s in SHAPES]
)
def test_every_handoff_shape_runs_as_the_flow_service_account(
    request: pytest.FixtureRequest,
    flow_identity: Path,
    kube: Kube,
    seeded: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
    shape: str,
) -> None:
    (spec, svc_name, live, selector), changes, spare, strategy, phase = SHAPES[shape]
    if spare:
        request.getfixturevalue("spare_gpus")
    spec_file = spec_in(seeded, spec, tmp_path, **changes)
    before = kube.apps.read_namespaced_deployment(live, seeded).spec.template
    env = {**handoff_env, "KUBECONFIG": str(flow_identity)}
    result = run_handoff(spec_file, env, "--auto-approve", "--kubeconfig", str(flow_identity))
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == (0 if phase == "done" else 1), output
    assert "forbidden" not in output.lower(), output
    svc = service(kube, seeded, svc_name)
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and (ledger.strategy, ledger.phase) == (strategy, phase), output
    assert "rollback problems" not in (ledger.cause or ""), ledger.cause
    assert history_entries(svc.metadata.annotations)[-1]["outcome"] == phase
    if phase == "rolled-back":
        assert svc.spec.selector == selector
    if spec == "coder-14b-fp16":
        after = kube.apps.read_namespaced_deployment(live, seeded).spec.template
        assert (after == before) is (phase == "rolled-back")
    names = [d.metadata.name for d in kube.apps.list_namespaced_deployment(seeded).items]
    assert f"{live}{TWIN_SUFFIX}" not in names


def _without(docs: list[dict[str, Any]], resource: str, verb: str) -> list[dict[str, Any]]:
    """The RBAC documents with `verb` on `resource` taken out of the Role."""
    docs = copy.deepcopy(docs)
    role = next(d for d in docs if d["kind"] == "Role")
    for rule in role["rules"]:
        if resource in rule["resources"] and verb in rule["verbs"]:
            rule["verbs"].remove(verb)
    role["rules"] = [rule for rule in role["rules"] if rule["verbs"]]
    return docs


@pytest.fixture
def identity_without_scale(
    sandbox: SandboxState, kube: Kube, seeded: str, tmp_path: Path
) -> Iterator[Path]:
    docs = _without(rbac_documents(seeded), "deployments/scale", "patch")
    yield install_identity(sandbox, kube, seeded, docs, tmp_path)
    remove_cluster_objects(kube, seeded)


def test_a_missing_grant_stops_the_handoff_at_plan_time_with_nothing_changed(
    identity_without_scale: Path,
    kube: Kube,
    seeded: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
) -> None:
    # In place the handoff scales its Deployment (up after the swap, back in a
    # rollback): the plan's dry-run finds it may not, before the old pods stop.
    spec_file = spec_in(seeded, "coder-14b-fp16", tmp_path, **PASSING)
    before = service(kube, seeded, "coder-predictor")
    live = kube.apps.read_namespaced_deployment("candle-vllm", seeded)
    env = {**handoff_env, "KUBECONFIG": str(identity_without_scale)}
    result = run_handoff(spec_file, env, "--auto-approve")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "refused" in output and "dry-run of scale Deployment candle-vllm" in output, output
    after = service(kube, seeded, "coder-predictor")
    assert after.metadata.resource_version == before.metadata.resource_version
    assert ANNOTATION not in (after.metadata.annotations or {})
    now = kube.apps.read_namespaced_deployment("candle-vllm", seeded)
    assert now.metadata.resource_version == live.metadata.resource_version


@pytest.mark.slow  # a whole side-by-side handoff with its parity gate: 2-3 minutes
def test_a_grant_revoked_mid_handoff_still_ends_rolled_back(
    flow_identity: Path, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**handoff_env, "KUBECONFIG": str(flow_identity)}
    # One level of load is enough for this test's latency gate.
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates={"latency": {"levels": [1]}})
    with handoff_process(spec_file, env, "--auto-approve") as run:
        await_phase(kube, seeded, "clef-serve", "warm", run)
        # While the gates run, an administrator takes scaling away: retiring the old
        # pods is refused, and so is the rollback's scale-down of the candidate.
        docs = _without(rbac_documents(seeded), "deployments/scale", "patch")
        rules = next(d for d in docs if d["kind"] == "Role")["rules"]
        client.RbacAuthorizationV1Api(kube.api).patch_namespaced_role(
            "handoff", seeded, {"rules": rules}
        )
        output, _ = run.communicate(timeout=300)
    assert run.returncode != 0, output[-3000:]
    svc = service(kube, seeded, "clef-serve")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back", output[-3000:]
    cause = ledger.cause or ""
    assert "forbidden" in cause and "rollback problems" in cause, cause
    assert svc.spec.selector == {"app": "clef-serve"}, "the Service is back on the live pods"


def _forbidden(call: Callable[[], Any]) -> int:
    with pytest.raises(ApiException) as refused:
        call()
    return int(refused.value.status or 0)


def _unrelated_objects(kube: Kube, namespace: str) -> None:
    """A Deployment, a Service and a Lease of the namespace that no spec names."""
    labels = {"app": "other-app"}
    template = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "x", "image": "x"}]},
    }
    kube.apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "other-app"},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template},
        },
    )
    kube.core.create_namespaced_service(
        namespace,
        {"metadata": {"name": "other-svc"}, "spec": {"selector": labels, "ports": [{"port": 80}]}},
    )
    client.CoordinationV1Api(kube.api).create_namespaced_lease(
        namespace, {"metadata": {"name": "other-controller"}, "spec": {"holderIdentity": "it"}}
    )


def test_the_flow_service_account_cannot_read_secrets_or_leave_its_namespace(
    flow_identity: Path, kube: Kube, seeded: str
) -> None:
    _unrelated_objects(kube, seeded)
    api = config.new_client_from_config(config_file=str(flow_identity))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    leases = client.CoordinationV1Api(api)
    scale_to_zero = {"spec": {"replicas": 0}}
    refusals = {
        # Writes name their objects (handoff rbac render): nothing no spec names.
        "scale an unrelated Deployment": lambda: apps.patch_namespaced_deployment_scale(
            "other-app", seeded, scale_to_zero
        ),
        "patch an unrelated Deployment": lambda: apps.patch_namespaced_deployment(
            "other-app", seeded, {"metadata": {"labels": {"x": "y"}}}
        ),
        "point an unrelated Service elsewhere": lambda: core.patch_namespaced_service(
            "other-svc", seeded, {"spec": {"selector": {"app": "candle-vllm"}}}
        ),
        "read another controller's Lease": lambda: leases.read_namespaced_lease(
            "other-controller", seeded
        ),
        "delete another controller's Lease": lambda: leases.delete_namespaced_lease(
            "other-controller", seeded
        ),
        "list Secrets": lambda: core.list_namespaced_secret(seeded),
        "read its own token Secret": lambda: core.read_namespaced_secret("handoff-token", seeded),
        # Only `get` by name: warm-up reads the one its pods need (is it missing yet?).
        "list ServiceAccounts": lambda: core.list_namespaced_service_account(seeded),
        "delete the Service": lambda: core.delete_namespaced_service("coder-predictor", seeded),
        "create a Service": lambda: core.create_namespaced_service(
            seeded, {"metadata": {"name": "x"}, "spec": {"ports": [{"port": 80}]}}
        ),
        "delete a live Deployment": lambda: apps.delete_namespaced_deployment(
            "candle-vllm", seeded
        ),
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
