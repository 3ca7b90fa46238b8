"""The live Deployment belongs to its users' tool, not to the handoff: the seeds' before
state is made with `kubectl apply` (client-side: kubectl's field manager and a
last-applied-configuration), and its users set fields that the candidate manifest
leaves out. After a handoff, in place or through a twin, the running pods' template
must be exactly the candidate manifest as rendered (nothing of the old spec survives)
and the revision label the hash of that template. Used by the in-place and twin tests."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest

from flows.kube.client import Kube
from flows.kube.wait import wait_rolled_out
from flows.ledger import parse_ledger
from flows.render import compute_revision, load_manifest, render_candidate
from flows.spec import HandoffSpec, load_spec
from sandbox.kubectl import kubectl_apply
from sandbox.seed import World, before_state_documents
from sandbox.state import SandboxState
from tests.world import PROXY_SYNC_S, service, wait_until

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# What the users' GPTQ Deployment had and the fp16 candidate manifest does not.
USERS_ENV = {"name": "CANDLE_GPTQ_KERNEL", "value": "exllama"}
USERS_ANNOTATION = {"prometheus.io/scrape": "true"}


def _users_coder(world: World, namespace: str) -> dict[str, Any]:
    [coder] = [
        d
        for d in before_state_documents(world, namespace)
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "candle-vllm"
    ]
    template = coder["spec"]["template"]
    template["metadata"]["annotations"] = dict(USERS_ANNOTATION)
    template["spec"]["containers"][0]["env"] = [dict(USERS_ENV)]
    return coder


def _as_stored(kube: Kube, body: dict[str, Any]) -> dict[str, Any]:
    """The pod template the apiserver stores for body (its defaults filled in),
    through a server-side dry-run create under a name of its own."""
    probe = copy.deepcopy(body)
    probe["metadata"]["name"] += "-expected"
    stored = kube.apps.create_namespaced_deployment(
        probe["metadata"]["namespace"], probe, dry_run="All"
    )
    return kube.api.sanitize_for_serialization(stored.spec.template)  # type: ignore[no-any-return]


def _running_template(kube: Kube, namespace: str, deployment: str) -> dict[str, Any]:
    """The template of the ReplicaSet whose pods run, without its pod-template-hash."""
    pods = kube.core.list_namespaced_pod(namespace).items
    owners = {
        ref.name
        for p in pods
        if p.metadata.deletion_timestamp is None
        for ref in p.metadata.owner_references or []
        if ref.kind == "ReplicaSet" and ref.name.startswith(f"{deployment}-")
    }
    sets = [
        rs
        for rs in kube.apps.list_namespaced_replica_set(namespace).items
        if rs.metadata.name in owners
        and any(o.name == deployment for o in rs.metadata.owner_references or [])
    ]
    assert len(sets) == 1, f"pods of {deployment} run from {[s.metadata.name for s in sets]}"
    template = kube.api.sanitize_for_serialization(sets[0].spec.template)
    template["metadata"]["labels"].pop("pod-template-hash")
    return template  # type: ignore[no-any-return]


def _spec(spec_file: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> HandoffSpec:
    for key in ("HANDOFF_IMAGES", "CANDLE_VLLM_SOURCE"):
        monkeypatch.setenv(key, env[key])
    return load_spec(spec_file)


def users_changed_the_coder(
    sandbox: SandboxState, kube: Kube, world: World, namespace: str
) -> None:
    """The seeded coder belongs to kubectl; its users then set fields (with kubectl
    apply) that the candidate manifest leaves out."""
    live = kube.apps.read_namespaced_deployment("candle-vllm", namespace)
    assert LAST_APPLIED in live.metadata.annotations
    assert "kubectl-client-side-apply" in {m.manager for m in live.metadata.managed_fields}
    kubectl_apply(sandbox.kubeconfig, [_users_coder(world, namespace)])
    wait_rolled_out(kube, namespace, "candle-vllm", deadline_s=120)
    old_pods_gone_from_the_data_plane(kube, namespace, "candle-vllm")


def old_pods_gone_from_the_data_plane(kube: Kube, namespace: str, name: str) -> None:
    """A finished rollout still has old pods terminating, and a proxy routes to them
    until its next sync: clients of the users' own rollout would fail, not the handoff's.
    Wait until those pods are gone, then for the proxies to apply it."""
    selector = kube.apps.read_namespaced_deployment(name, namespace).spec.selector.match_labels
    labels = ",".join(f"{k}={v}" for k, v in selector.items())

    def none_terminating() -> bool:
        pods = kube.core.list_namespaced_pod(namespace, label_selector=labels).items
        return not any(p.metadata.deletion_timestamp for p in pods)

    wait_until(none_terminating, timeout_s=120, what=f"old pods of {namespace}/{name} to stop")
    time.sleep(float(PROXY_SYNC_S))  # the proxy's sync, with the margin the runs get


def assert_runs_exactly_the_candidate(
    kube: Kube,
    namespace: str,
    spec_file: Path,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The running pods' template is the rendered candidate manifest, nothing else, and
    the revision label is the hash of it; the users' marks on the object stay."""
    ledger = parse_ledger(service(kube, namespace, "coder-predictor").metadata.annotations)
    assert ledger is not None and ledger.phase == "done"
    spec = _spec(spec_file, env, monkeypatch)
    manifest = load_manifest(spec)
    rendered = render_candidate(
        spec,
        manifest,
        pinned=ledger.image,
        revision=ledger.revision or "",
        replicas=spec.candidate.replicas,
        handoff_id=ledger.handoff_id,
    )
    expected = _as_stored(kube, rendered)
    running = _running_template(kube, namespace, "candle-vllm")
    assert running == expected
    deployment = kube.apps.read_namespaced_deployment("candle-vllm", namespace)
    assert kube.api.sanitize_for_serialization(deployment.spec.template) == expected
    assert ledger.revision == compute_revision(spec, manifest, ledger.image)
    assert running["metadata"]["labels"]["handoff.dev/revision"] == ledger.revision
    assert LAST_APPLIED in deployment.metadata.annotations
