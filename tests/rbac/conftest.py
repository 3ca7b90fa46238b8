"""The handoff's world on the sandbox (shared with tests/handoff) and the flow's
ServiceAccount from manifests/rbac/ applied to a seeded namespace, with a kubeconfig
that authenticates as it."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from flows.kube.client import Kube
from flows.kube.write import apply_manifest
from sandbox.kubeconfig import write_kubeconfig
from sandbox.state import SandboxState

RBAC = Path(__file__).resolve().parents[2] / "manifests" / "rbac" / "handoff.yaml"
CLUSTER_KINDS = ("ClusterRole", "ClusterRoleBinding")


def rbac_documents(namespace: str) -> list[dict]:  # type: ignore[type-arg]
    """manifests/rbac/handoff.yaml moved to namespace (cluster-wide names suffixed)."""
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    for doc in docs:
        if doc["kind"] in CLUSTER_KINDS:
            doc["metadata"]["name"] += f"-{namespace}"
        else:
            doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += f"-{namespace}"
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
    return docs


@pytest.fixture
def flow_identity(
    sandbox: SandboxState,
    kube: Kube,
    seeded: str,
    tmp_path: Path,
) -> Iterator[Path]:
    """A kubeconfig holding the `handoff` ServiceAccount's token in the seeded namespace."""
    yield install_identity(sandbox, kube, seeded, rbac_documents(seeded), tmp_path)
    remove_cluster_objects(kube, seeded)


def install_identity(
    sandbox: SandboxState,
    kube: Kube,
    namespace: str,
    docs: list[dict[str, Any]],
    tmp_path: Path,
    account: str = "handoff",
) -> Path:
    """Apply the RBAC documents; a kubeconfig authenticating as their ServiceAccount."""
    for doc in docs:
        apply_manifest(kube, doc)
    token = _service_account_token(kube, namespace, account)
    return write_kubeconfig(
        tmp_path / f"{account}-sa.kubeconfig",
        server=sandbox.server,
        ca_crt=sandbox.run_dir / "pki" / "ca.crt",
        user=f"system:serviceaccount:{namespace}:{account}",
        token=token,
    )


def remove_cluster_objects(kube: Kube, namespace: str) -> None:
    """Cluster-wide objects outlive the namespace: remove them."""
    api = client.RbacAuthorizationV1Api(kube.api)
    api.delete_cluster_role_binding(f"handoff-gpu-ledger-{namespace}")
    api.delete_cluster_role(f"handoff-gpu-ledger-{namespace}")


def _service_account_token(admin: Kube, namespace: str, name: str) -> str:
    """On 1.20 the token controller puts a token Secret on every ServiceAccount."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        account = admin.core.read_namespaced_service_account(name, namespace)
        if account.secrets:
            secret = admin.core.read_namespaced_secret(account.secrets[0].name, namespace)
            if secret.data and secret.data.get("token"):
                return base64.b64decode(secret.data["token"]).decode()
        time.sleep(0.5)
    raise AssertionError(f"no token Secret for ServiceAccount {namespace}/{name} after 60 s")
