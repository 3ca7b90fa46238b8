"""Warm-up tells an admission refusal from a passing failure by the apiserver's status,
not by its wording: a validating webhook on loopback that denies the candidate's pods in
words no built-in refusal uses fails the wait at once, with the status and the webhook's
message; a webhook that answers 503 (a failure, not a refusal) is waited through."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from flows.kube.client import Kube
from flows.warm import wait_created
from sandbox import controlplane
from tests.kube.webhook_server import Webhook, admission_webhook

pytestmark = pytest.mark.timeout(300)
DENY_LABEL = "handoff-test/admission"
WORDS = "GPUs are lent to the night batch until 06:00"


@pytest.fixture(scope="module")
def webhook(
    plane: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webhook]:
    from kubernetes import client

    from flows.kube.client import connect

    kube = connect(plane.kubeconfig)
    name = "gpu-lending.handoff.test"
    with admission_webhook(tmp_path_factory.mktemp("webhook")) as served:
        client.AdmissionregistrationV1Api(kube.api).create_validating_webhook_configuration(
            {
                "metadata": {"name": name},
                "webhooks": [
                    {
                        "name": name,
                        "clientConfig": {"url": served.url, "caBundle": served.ca_bundle},
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["pods"],
                            }
                        ],
                        "namespaceSelector": {"matchLabels": {DENY_LABEL: "on"}},
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 5,
                    }
                ],
            }
        )
        yield served
    kube.close()


@pytest.fixture
def watched(admin: Kube, webhook: Webhook) -> str:
    """A namespace the webhook judges, with its default ServiceAccount (pods need it)."""
    namespace = f"adm-{uuid.uuid4().hex[:6]}"
    admin.core.create_namespace({"metadata": {"name": namespace, "labels": {DENY_LABEL: "on"}}})
    deadline = time.monotonic() + 30
    while not admin.core.list_namespaced_service_account(namespace).items:
        assert time.monotonic() < deadline, "no default ServiceAccount"
        time.sleep(0.2)
    return namespace


def _candidate(admin: Kube, namespace: str, **pod: object) -> None:
    container = {"name": "server", "image": "example.invalid/server:1"}
    admin.apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "candidate"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "candidate"}},
                "template": {
                    "metadata": {"labels": {"app": "candidate"}},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "containers": [container],
                        **pod,
                    },
                },
            },
        },
    )


def test_a_webhook_refusal_worded_its_own_way_fails_the_wait_at_once(
    admin: Kube, watched: str, webhook: Webhook
) -> None:
    webhook.verdicts.queued.clear()
    webhook.verdicts.then = {"message": WORDS}
    _candidate(admin, watched)
    started = time.monotonic()
    verdict = wait_created(admin, watched, {"app": "candidate"}, 1, 90)
    assert verdict.failure is not None, "the refused pods were waited for"
    assert time.monotonic() - started < 45
    assert WORDS in verdict.failure and "400" in verdict.failure, verdict.failure
    assert admin.core.list_namespaced_pod(watched).items == []


def test_a_webhook_failing_with_503_is_waited_through(
    admin: Kube, watched: str, webhook: Webhook
) -> None:
    busy = {"code": 503, "message": "busy, ask again"}
    webhook.verdicts.queued[:] = [busy] * 3
    webhook.verdicts.then = None
    _candidate(admin, watched)
    verdict = wait_created(admin, watched, {"app": "candidate"}, 1, 90)
    assert verdict.failure is None, verdict.failure
    assert webhook.verdicts.asked >= 4
    assert len(admin.core.list_namespaced_pod(watched).items) == 1


def test_a_resource_quota_refusal_fails_the_wait_at_once(
    admin: Kube, watched: str, webhook: Webhook
) -> None:
    webhook.verdicts.queued.clear()
    webhook.verdicts.then = None
    admin.core.create_namespaced_resource_quota(
        watched, {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
    )
    deadline = time.monotonic() + 30
    while (admin.core.read_namespaced_resource_quota("no-pods", watched).status.used or {}).get(
        "pods"
    ) != "0":
        assert time.monotonic() < deadline, "the quota was never counted"
        time.sleep(0.2)
    _candidate(admin, watched)
    verdict = wait_created(admin, watched, {"app": "candidate"}, 1, 90)
    assert verdict.failure is not None, "the refused pods were waited for"
    assert "exceeded quota: no-pods" in verdict.failure and "403" in verdict.failure


def test_a_service_account_not_made_yet_is_waited_for(
    admin: Kube, watched: str, webhook: Webhook
) -> None:
    # Admission answers 403 while the pods' ServiceAccount does not exist: a passing
    # failure (it is often created moments later, by the same release), not a refusal.
    webhook.verdicts.queued.clear()
    webhook.verdicts.then = None
    _candidate(admin, watched, serviceAccountName="late")
    timer = threading.Timer(
        8, admin.core.create_namespaced_service_account, (watched, {"metadata": {"name": "late"}})
    )
    timer.start()
    try:
        verdict = wait_created(admin, watched, {"app": "candidate"}, 1, 90)
    finally:
        timer.join()
    assert verdict.failure is None, verdict.failure
    assert len(admin.core.list_namespaced_pod(watched).items) == 1
