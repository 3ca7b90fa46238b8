"""A twin is deleted only while it is the workload the handoff made: a Deployment of its
name made again since (another template) is left alone, with what to do named."""

from __future__ import annotations

import pytest

from flows.kube import write
from flows.kube.client import Kube
from flows.ledger import REVISION_LABEL
from tests.lease.test_lease import admin, ns, plane

__all__ = ["admin", "ns", "plane"]  # the control plane fixtures, shared
pytestmark = pytest.mark.timeout(300)
TWIN = "serve-handoff"


def _twin(admin: Kube, ns: str, revision: str) -> None:
    labels = {"app": "serve", REVISION_LABEL: revision}
    admin.apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": TWIN},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "s", "image": "s"}]},
                },
            },
        },
    )


def _exists(admin: Kube, ns: str) -> bool:
    return any(d.metadata.name == TWIN for d in admin.apps.list_namespaced_deployment(ns).items)


def test_a_twin_made_again_by_someone_is_not_deleted(admin: Kube, ns: str) -> None:
    _twin(admin, ns, revision="theirs")
    with pytest.raises(write.WorkloadReplaced, match="someone made it again"):
        write.delete_deployment(admin, ns, TWIN, revision=(REVISION_LABEL, "ours"))
    assert _exists(admin, ns)


def test_the_handoffs_own_twin_is_deleted_and_a_missing_one_is_fine(admin: Kube, ns: str) -> None:
    _twin(admin, ns, revision="ours")
    write.delete_deployment(admin, ns, TWIN, revision=(REVISION_LABEL, "ours"))
    write.delete_deployment(admin, ns, TWIN, revision=(REVISION_LABEL, "ours"))  # gone: fine
    deployment = admin.apps.list_namespaced_deployment(ns).items
    assert all(d.metadata.deletion_timestamp or d.metadata.name != TWIN for d in deployment)
