"""A twin is deleted only while it is the workload the handoff made (its handoff.dev/id
annotation): a Deployment of its name made again since is left alone, with what to do
named."""

from __future__ import annotations

import pytest

from flows.kube import write
from flows.kube.client import Kube
from flows.render import HANDOFF_ID_ANNOTATION
from tests.lease.test_lease import admin, ns, plane

__all__ = ["admin", "ns", "plane"]  # the control plane fixtures, shared
pytestmark = pytest.mark.timeout(300)
TWIN = "serve-handoff"


def _twin(admin: Kube, ns: str, handoff_id: str | None) -> None:
    labels = {"app": "serve"}
    annotations = {HANDOFF_ID_ANNOTATION: handoff_id} if handoff_id else {}
    admin.apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": TWIN, "annotations": annotations},
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
    _twin(admin, ns, handoff_id=None)  # made by a person
    with pytest.raises(write.WorkloadReplaced, match="someone made it again"):
        write.delete_deployment(admin, ns, TWIN, marked=(HANDOFF_ID_ANNOTATION, "run-a"))
    assert _exists(admin, ns)


def test_the_handoffs_own_twin_is_deleted_and_a_missing_one_is_fine(admin: Kube, ns: str) -> None:
    _twin(admin, ns, handoff_id="run-a")
    write.delete_deployment(admin, ns, TWIN, marked=(HANDOFF_ID_ANNOTATION, "run-a"))
    write.delete_deployment(admin, ns, TWIN, marked=(HANDOFF_ID_ANNOTATION, "run-a"))  # gone: fine
    deployment = admin.apps.list_namespaced_deployment(ns).items
    assert all(d.metadata.deletion_timestamp or d.metadata.name != TWIN for d in deployment)
