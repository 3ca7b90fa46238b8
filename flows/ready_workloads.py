"""Which workload each of the Service's ready endpoints belongs to, for the timeline.

The Endpoints name each ready pod (targetRef); the pod's labels and owning ReplicaSet say
whose it is. A pod's labels and owner do not change, so each pod is looked up once: the
namespace's pods are listed only when an endpoint names a pod not seen before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from flows.kube import read
from flows.kube.client import Kube
from flows.kube.objects import PodSnapshot, owned_by_deployment
from flows.ledger import REVISION_LABEL
from flows.plan import Plan
from flows.render import TWIN_SUFFIX, is_twin
from flows.report.timeline import CANDIDATE, LIVE, TWIN, UNKNOWN, Counts
from flows.spec import HandoffSpec


def compute_workload(pod: PodSnapshot | None, *, twin: str, revision: str | None) -> str:
    """The twin's pods by their Deployment; the candidate's by the handoff's revision label
    (in place and through a twin the live Deployment's new pods carry it too); any other
    pod the Service routes to is the live workload's."""
    if pod is None:
        return UNKNOWN
    if owned_by_deployment(pod, twin):
        return TWIN
    if revision is not None and pod.labels.get(REVISION_LABEL) == revision:
        return CANDIDATE
    return LIVE


def workload_names(spec: HandoffSpec, plan: Plan) -> dict[str, str]:
    """Each workload's Deployment, as the picture's legend names it."""
    names = {LIVE: ", ".join(d.name for d in plan.current) or "-"}
    names[CANDIDATE] = spec.candidate.deployment
    if is_twin(spec, plan.strategy):
        names[TWIN] = spec.candidate.deployment + TWIN_SUFFIX
    return names


class ReadyWorkloads:
    """Called, counts the Service's ready endpoints per workload; `revision` is read at
    each call (the ledger holds it once the candidate is applied, before its pods start)."""

    def __init__(self, kube: Kube, spec: HandoffSpec, revision: Callable[[], str | None]):
        self._kube = kube
        self._spec = spec
        self._revision = revision
        self._twin = spec.candidate.deployment + TWIN_SUFFIX
        self._pods: dict[str, PodSnapshot | None] = {}  # None: no such pod when listed

    def __call__(self) -> Counts:
        namespace = self._spec.namespace
        ready = read.read_endpoints(self._kube, namespace, self._spec.service).ready_pods
        if any(name not in self._pods for name in ready):
            self._pods = {p.name: p for p in read.list_pods(self._kube, namespace)}
            # An endpoint without a pod (an address only) is not looked up again.
            self._pods.update((name, None) for name in ready if name not in self._pods)
        revision = self._revision()
        return dict(
            Counter(
                compute_workload(self._pods.get(name), twin=self._twin, revision=revision)
                for name in ready
            )
        )
