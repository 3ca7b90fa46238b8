"""The optional ValidatingAdmissionPolicy (manifests/rbac/admission-policy.yaml) is what
`handoff rbac render --policy` makes of the specs, and its checks admit every candidate
the specs name while refusing each escalation `create` on Deployments would otherwise
allow. The sandbox's 1.20 control plane has no such policies, so the checks' CEL runs
here in cel-python, not in an apiserver: a check Kubernetes' CEL reads differently would
pass here and still need a 1.30 cluster to be seen."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from flows.render import load_manifest
from flows.spec import load_spec
from tests.rbac.conftest import RBAC

POLICY = RBAC.parent / "admission-policy.yaml"
ROOT = RBAC.parents[2]
SPECS = sorted((ROOT / "manifests" / "handoffs").glob("*.yaml"))
ENV = celpy.Environment()


def _policy(name: str = "handoff-pod-templates-") -> dict[str, Any]:
    return next(
        d
        for d in yaml.safe_load_all(POLICY.read_text())
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"].startswith(name)
    )


def _refusals(deployment: dict[str, Any]) -> list[str]:
    """The messages of the policy's checks that `deployment` fails."""
    activation = {"object": celpy.json_to_cel(deployment)}
    return [
        v["message"]
        for v in _policy()["spec"]["validations"]
        if not ENV.program(ENV.compile(v["expression"])).evaluate(activation)
    ]


def _candidates() -> list[dict[str, Any]]:
    return [load_manifest(load_spec(path)) for path in SPECS]


def test_the_shipped_policy_is_the_render_of_the_specs() -> None:
    rendered = subprocess.run(
        [sys.executable, "-m", "cli", "rbac", "render", "--policy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout == POLICY.read_text(), (
        "run `handoff rbac render --policy --out manifests/rbac/admission-policy.yaml`"
    )


def test_it_applies_only_to_the_handoff_account() -> None:
    [condition] = _policy()["spec"]["matchConditions"]
    program = ENV.program(ENV.compile(condition["expression"]))

    def matches(user: str) -> bool:
        return bool(
            program.evaluate({"request": celpy.json_to_cel({"userInfo": {"username": user}})})
        )

    assert matches("system:serviceaccount:llm-serving:handoff")
    assert not matches("system:serviceaccount:llm-serving:prefect-worker")
    assert not matches("kubernetes-admin")


def test_every_candidate_the_specs_name_is_admitted_pinned_or_not() -> None:
    for deployment in _candidates():
        assert _refusals(deployment) == [], deployment["metadata"]["name"]
        pinned = copy.deepcopy(deployment)
        for c in pinned["spec"]["template"]["spec"]["containers"]:
            c["image"] = c["image"].rsplit(":", 1)[0] + "@sha256:" + "0" * 64
        assert _refusals(pinned) == [], "the flow runs the candidate pinned by digest"


def test_pods_are_created_only_as_a_dry_run() -> None:
    """RBAC cannot limit `pods: create` to dry-run; the policy does: the admission probe's
    dry-run is admitted, a persisted pod (one under another ServiceAccount, mounting the
    worker's Secret) is refused."""
    policy = _policy("handoff-pods-dry-run-only-")
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods"] and rule["operations"] == ["CREATE"]
    assert rule["apiGroups"] == [""]

    def refusals(request: dict[str, Any]) -> list[str]:
        activation = {"request": celpy.json_to_cel(request)}
        return [
            v["message"]
            for v in policy["spec"]["validations"]
            if not ENV.program(ENV.compile(v["expression"])).evaluate(activation)
        ]

    assert refusals({"dryRun": True}) == []
    assert len(refusals({"dryRun": False})) == 1
    assert len(refusals({})) == 1  # dryRun unset: persisted


def _escalate(pod: dict[str, Any], how: str) -> None:
    container = pod["containers"][0]
    if how == "another ServiceAccount":
        pod["serviceAccountName"] = "prefect-worker"
    elif how == "a Secret volume":
        pod.setdefault("volumes", []).append({"name": "s", "secret": {"secretName": "x"}})
    elif how == "a projected token":
        pod.setdefault("volumes", []).append({"name": "t", "projected": {"sources": []}})
    elif how == "a host path":
        pod.setdefault("volumes", []).append({"name": "h", "hostPath": {"path": "/"}})
    elif how == "the host network":
        pod["hostNetwork"] = True
    elif how == "a privileged container":
        container["securityContext"] = {"privileged": True}
    elif how == "an image from elsewhere":
        container["image"] = "evil.example/shell:1"
    elif how == "an init container from elsewhere":
        pod["initContainers"] = [{"name": "i", "image": "evil.example/shell:1"}]
    elif how == "a look-alike repository":
        container["image"] = container["image"].split(":")[0] + "-evil:1"


@pytest.mark.parametrize(
    "how",
    [
        "another ServiceAccount",
        "a Secret volume",
        "a projected token",
        "a host path",
        "the host network",
        "a privileged container",
        "an image from elsewhere",
        "an init container from elsewhere",
        "a look-alike repository",
    ],
)
def test_each_escalation_is_refused(how: str) -> None:
    for deployment in _candidates():
        escalated = copy.deepcopy(deployment)
        _escalate(escalated["spec"]["template"]["spec"], how)
        assert len(_refusals(escalated)) == 1, (how, _refusals(escalated))


def test_a_manifest_that_cannot_be_read_renders_nothing(tmp_path: Path) -> None:
    spec = SPECS[0].read_text().replace("../llm-serving/", str(tmp_path) + "/missing-")
    (tmp_path / "spec.yaml").write_text(spec)
    result = subprocess.run(
        [sys.executable, "-m", "cli", "rbac", "render", "--policy", str(tmp_path / "spec.yaml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert "cannot render RBAC" in result.stderr, result.stderr
