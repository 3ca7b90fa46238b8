"""What RBAC cannot say: which pods the handoff account may put in a Deployment.

`create` on Deployments cannot be narrowed by name, so with RBAC alone the flow's
account could start a pod under any ServiceAccount of its namespace, mount any Secret, or
run any image. A ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes
1.30 and later) checks every Deployment that account creates or updates: its pods run
under a ServiceAccount a candidate manifest names (else `default`), mount no Secret,
projected token or host path, share no host namespace, run no privileged container, and
pull only from the repositories the specs and their candidate manifests name. A second
policy lets that account create pods only as a dry-run: the Role's `pods: create` exists
for flows/kube/admission.py, which sends a pod of a stuck ReplicaSet with dryRun=All to
learn admission's status code, and RBAC cannot restrict a verb to dry-run. Rendered from
the specs by `handoff rbac render --policy` (manifests/rbac/admission-policy.yaml).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from flows.rbac import ACCOUNT
from flows.render import load_manifest
from flows.spec import HandoffSpec

NAME = "handoff-pod-templates"
DRY_RUN_PODS = "handoff-pods-dry-run-only"
SAFE_VOLUMES = ["name", "persistentVolumeClaim", "emptyDir", "configMap"]

HEADER = f"""\
# Optional, Kubernetes 1.30 and later: what the `{ACCOUNT}` account may put in a pod
# template. Rendered by `handoff rbac render --policy` (flows/rbac_policy.py); do not edit
# by hand. Apply with `kubectl apply -f manifests/rbac/admission-policy.yaml`.
"""


def _repository(image: str) -> str:
    """An image reference without its tag or digest."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def allowed(specs: Iterable[HandoffSpec]) -> dict[str, dict[str, list[str]]]:
    """namespace → the ServiceAccounts and image repositories its pod templates may use."""
    accounts: dict[str, set[str]] = defaultdict(set)
    repositories: dict[str, set[str]] = defaultdict(set)
    for spec in specs:
        pod = load_manifest(spec)["spec"]["template"]["spec"]
        accounts[spec.namespace].add(pod.get("serviceAccountName") or "default")
        containers = [*pod.get("containers", []), *pod.get("initContainers", [])]
        repositories[spec.namespace].add(spec.image.repository)
        repositories[spec.namespace].update(_repository(c["image"]) for c in containers)
    return {
        ns: {"accounts": sorted(accounts[ns]), "repositories": sorted(repositories[ns])}
        for ns in sorted(accounts)
    }


def validations(accounts: list[str], repositories: list[str]) -> list[dict[str, str]]:
    """The policy's checks, as CEL over the admitted Deployment (`object`)."""
    pod = "object.spec.template.spec"
    images = f"{pod}.containers + (has({pod}.initContainers) ? {pod}.initContainers : [])"
    repos = json.dumps(repositories)
    return [
        {
            "expression": f"(has({pod}.serviceAccountName) ? {pod}.serviceAccountName : "
            f"'default') in {json.dumps(accounts)}",
            "message": f"pods may run only as {', '.join(accounts)}",
        },
        {
            "expression": f"!has({pod}.volumes) || {pod}.volumes.all(v, "
            f"v.all(k, k in {json.dumps(SAFE_VOLUMES)}))",
            "message": "volumes may only be persistentVolumeClaim, emptyDir or configMap: "
            "no Secret, projected token or host path",
        },
        {
            "expression": f"!(has({pod}.hostNetwork) && {pod}.hostNetwork) && "
            f"!(has({pod}.hostPID) && {pod}.hostPID) && !(has({pod}.hostIPC) && {pod}.hostIPC)",
            "message": "pods may not share the node's network, PID or IPC namespace",
        },
        {
            "expression": f"({images}).all(c, !has(c.securityContext) || "
            "!has(c.securityContext.privileged) || !c.securityContext.privileged)",
            "message": "no privileged container",
        },
        {
            "expression": f"({images}).all(c, {repos}.exists(r, c.image == r || "
            "c.image.startsWith(r + ':') || c.image.startsWith(r + '@')))",
            "message": f"images only from {', '.join(repositories)}",
        },
    ]


def _policy_and_binding(
    name: str, namespace: str, resource: str, operations: list[str], validations: list[Any]
) -> list[dict[str, Any]]:
    """A policy over the handoff account's `operations` on `resource` (group inferred),
    bound to `namespace`."""
    user = f"system:serviceaccount:{namespace}:{ACCOUNT}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["" if resource == "pods" else "apps"],
                        "apiVersions": ["v1"],
                        "operations": operations,
                        "resources": [resource],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "the-handoff-account",
                    "expression": f"request.userInfo.username == '{user}'",
                }
            ],
            "validations": validations,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    return [policy, binding]


DRY_RUN_ONLY = {
    "expression": "has(request.dryRun) && request.dryRun",
    "message": f"the {ACCOUNT} account creates pods only as a dry-run (to learn admission's "
    "answer for a ReplicaSet's pods); a pod it would persist is refused",
}


def _policy(namespace: str, allow: dict[str, list[str]]) -> list[dict[str, Any]]:
    templates = validations(allow["accounts"], allow["repositories"])
    return [
        *_policy_and_binding(
            f"{NAME}-{namespace}", namespace, "deployments", ["CREATE", "UPDATE"], templates
        ),
        *_policy_and_binding(
            f"{DRY_RUN_PODS}-{namespace}", namespace, "pods", ["CREATE"], [DRY_RUN_ONLY]
        ),
    ]


def render_policy(specs: Iterable[HandoffSpec]) -> str:
    """The policy and its binding for each namespace the specs hand off in (YAML)."""
    import yaml

    allow = allowed(specs)
    if not allow:
        raise ValueError("no specs to render a policy for: name at least one spec file")
    docs = [d for ns, a in allow.items() for d in _policy(ns, a)]
    return HEADER + "---\n".join(yaml.safe_dump(d, sort_keys=False, width=100) for d in docs)
