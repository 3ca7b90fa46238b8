"""The flow's RBAC, rendered from the specs it hands off: every write the Role grants
names the objects it may touch (`resourceNames`) wherever Kubernetes allows it.

`handoff rbac render` prints it; manifests/rbac/handoff.yaml is its output for the
repository's specs, and a test keeps the two equal. What a name cannot narrow:
`create` (the name is not known when it is authorised) — on Deployments, Leases,
ConfigMaps and Events — and reads (get/list/watch), which the plan needs across the
namespace to observe what serves. Creating a Deployment therefore still lets this
account start pods under any ServiceAccount of the namespace, with any volume: on
Kubernetes 1.30 and later the optional ValidatingAdmissionPolicy in
manifests/rbac/admission-policy.yaml closes that; before 1.30 nothing in RBAC can.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from flows.kube.bundles import BUNDLES_CONFIGMAP
from flows.lease import lease_name
from flows.render import TWIN_SUFFIX
from flows.spec import HandoffSpec

ACCOUNT = "handoff"

HEADER = """\
# The identity the handoff flow runs as in the cluster: ServiceAccount `handoff`.
# Rendered by `handoff rbac render` from the specs in manifests/handoffs/ (flows/rbac.py);
# do not edit by hand: a test checks this file equals the command's output.
#
# Least privilege, derived from what the flow calls (flows/kube/, flows/lease.py).
# Writes name their objects (resourceNames) wherever RBAC allows; `create` cannot be
# narrowed by name, reads are namespace-wide because the plan observes what serves.
#   services       get list watch            read the Service and what it routes to
#   services       patch, by name            swap its selector, ledger and history
#                                            annotations (merge patches with a
#                                            resourceVersion precondition): the specs'
#                                            Services only
#   deployments    get list watch create     read and watch rollouts; create: the apply
#                                            makes a new candidate or twin
#   deployments    patch update, by name     server-side apply of the candidate (also
#                                            dry-run in the plan); an in-place rollback
#                                            puts the previous spec back whole: the specs'
#                                            candidates, current Deployments and twins
#   deployments    delete, by name           the twin `<deployment>-handoff`, removed once
#                                            the live Deployment took its spec
#   deployments/scale  patch, by name        scale up / retire (and their dry runs)
#   replicasets    get list watch            warm-up sees pods admission refused; the
#                                            latency baseline is found by owner; the plan
#                                            pins the live selector to its hash
#   pods           get list watch            warm-up waits, crash-loop detection
#   pods           create (only dry-run)     when a candidate's ReplicaSet cannot create
#                                            its pods, a pod of its template is dry-run to
#                                            learn admission's status code. RBAC cannot
#                                            limit a verb to dry-run; the optional policy
#                                            (admission-policy.yaml, 1.30+) refuses a
#                                            persisted pod; before 1.30, creating
#                                            Deployments grants as much already
#   serviceaccounts get                      a 403 from that dry-run is a refusal only if
#                                            the pods' ServiceAccount exists
#   pods/log       get                       last log lines for the report
#   pods/portforward  get create             reach the candidate from outside the cluster
#                                            (get: the 1.20 websocket upgrade)
#   pods/exec      get create, only where    the drain of a server without in-flight
#                  a spec sets               metrics counts its pods' client connections
#                  retire.drain_connections  (`cat /proc/net/tcp`); exec reaches whatever
#                                            a pod can read, so it is off by default
#   endpoints      get list watch            verify the switch (only ready candidate pods)
#   endpointslices list watch                the same on what data planes route by
#   events         create list               record the swap and the outcome on the Service
#   leases         create; get update        one handoff per Service at a time: the
#                  delete, by name           Lease `handoff-<service>` of each spec
#   configmaps     create; get update,       the signed evidence bundles (one ConfigMap
#                  by name                   per namespace, flows/report/attest.py)
# Cluster-wide, read-only, for the GPU ledger of the plan: nodes get list, pods list. The
# GPUs a node has left are the requests of every pod on it, in any namespace, and only
# pod specs carry them: no narrower read answers that.
# Every write above but the Lease's is dry-run by the plan first (flows/dryrun.py), so a
# missing grant (a Deployment not named here) stops a handoff before it changes anything.
# Nothing here reads Secrets (the signing key is a mounted file), any ConfigMap but
# handoff-evidence, or any other namespace's objects.
"""


@dataclass
class _Names:
    """What the specs of one namespace write, by kind."""

    services: set[str] = field(default_factory=set)
    deployments: set[str] = field(default_factory=set)
    twins: set[str] = field(default_factory=set)
    leases: set[str] = field(default_factory=set)
    exec_pods: bool = False


def _names(specs: Iterable[HandoffSpec]) -> dict[str, _Names]:
    by_namespace: dict[str, _Names] = defaultdict(_Names)
    for spec in specs:
        names = by_namespace[spec.namespace]
        candidate = spec.candidate.deployment
        names.services.add(spec.service)
        names.leases.add(lease_name(spec.service))
        names.deployments.update({candidate, *spec.current})
        if candidate in spec.current:  # replaced side by side through a twin
            names.twins.add(candidate + TWIN_SUFFIX)
        names.deployments.update(names.twins)
        names.exec_pods |= spec.retire.drain_connections
    return dict(by_namespace)


def _rule(group: str, resource: str, verbs: list[str], names: Iterable[str] = ()) -> str:
    listed = sorted(names)
    core = '""'  # the core API group, as YAML must spell the empty string
    by_name = f"    resourceNames: [{', '.join(listed)}]\n" if listed else ""
    return (
        f"  - apiGroups: [{group or core}]\n    resources: [{resource}]\n"
        f"{by_name}    verbs: [{', '.join(verbs)}]\n"
    )


def _role(namespace: str, n: _Names) -> str:
    rules = [
        _rule("", "services", ["get", "list", "watch"]),
        _rule("", "services", ["patch"], n.services),
        _rule("apps", "deployments", ["get", "list", "watch", "create"]),
        _rule("apps", "deployments", ["patch", "update"], n.deployments),
        *([_rule("apps", "deployments", ["delete"], n.twins)] if n.twins else []),
        _rule("apps", "deployments/scale", ["patch"], n.deployments),
        _rule("apps", "replicasets", ["get", "list", "watch"]),
        _rule("", "pods", ["get", "list", "watch", "create"]),
        _rule("", "serviceaccounts", ["get"]),
        _rule("", "pods/log", ["get"]),
        _rule("", "pods/portforward", ["get", "create"]),
        # Only where a spec drains by connections: exec reaches what any pod can read.
        *([_rule("", "pods/exec", ["get", "create"])] if n.exec_pods else []),
        _rule("", "endpoints", ["get", "list", "watch"]),
        _rule("discovery.k8s.io", "endpointslices", ["list", "watch"]),
        _rule("", "events", ["create", "list"]),
        _rule("coordination.k8s.io", "leases", ["create"]),
        _rule("coordination.k8s.io", "leases", ["get", "update", "delete"], n.leases),
        _rule("", "configmaps", ["create"]),
        _rule("", "configmaps", ["get", "update"], [BUNDLES_CONFIGMAP]),
    ]
    return (
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n"
        f"  name: {ACCOUNT}\n  namespace: {namespace}\nrules:\n" + "".join(rules)
    )


def _namespaced(namespace: str, n: _Names) -> list[str]:
    meta = f"metadata:\n  name: {ACCOUNT}\n  namespace: {namespace}\n"
    return [
        f"apiVersion: v1\nkind: ServiceAccount\n{meta}",
        _role(namespace, n),
        f"apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n{meta}"
        f"roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: {ACCOUNT}\n"
        + _subjects([namespace]),
    ]


def _subjects(namespaces: list[str]) -> str:
    return "subjects:\n" + "".join(
        f"  - kind: ServiceAccount\n    name: {ACCOUNT}\n    namespace: {ns}\n" for ns in namespaces
    )


def _gpu_ledger(namespaces: list[str]) -> list[str]:
    return [
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n"
        "  name: handoff-gpu-ledger\nrules:\n"
        + _rule("", "nodes", ["get", "list"])
        + _rule("", "pods", ["list"]),
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n"
        "  name: handoff-gpu-ledger\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n"
        "  kind: ClusterRole\n  name: handoff-gpu-ledger\n" + _subjects(namespaces),
    ]


def render(specs: Iterable[HandoffSpec]) -> str:
    """The RBAC documents (YAML) that let the flow hand off exactly these specs."""
    by_namespace = _names(specs)
    if not by_namespace:
        raise ValueError("no specs to render RBAC for: name at least one spec file")
    namespaces = sorted(by_namespace)
    docs = [d for ns in namespaces for d in _namespaced(ns, by_namespace[ns])]
    return HEADER + "---\n".join([docs[0], *docs[1:], *_gpu_ledger(namespaces)])
