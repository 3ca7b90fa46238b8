"""Step 4, warm: scale the candidate to its preview count and wait until it serves.

Observes, through watches, first the candidate's ReplicaSet until its pods exist
(`decide_created`: failed at once when admission refuses them, e.g. a ResourceQuota,
LimitRange or pod security rejection, seen as the ReplicaSet's ReplicaFailure), then
its pods (`decide_warm`): Ready when enough pods are Ready, failed at once on
CrashLoopBackOff, a crash, ImagePullBackOff, Unschedulable or a pod on a node the node
controller marked NotReady (its kubelet silent past the grace period: the pod cannot
become Ready there until the node is back), else keep watching. Nodes are looked at on
every pod event and at least every NODE_LOOK_S.
With `candidate.capacity_wait_s` set, Unschedulable pods first get that long to be
scheduled (`decide_scheduled`), for autoscalers that add nodes for pending pods.
Ready also means answering: the smoke gate runs against every ready pod through a
port-forward. Changes only the candidate's replica count, so a rerun converges to
the same state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from flows.drift import candidate_replicas
from flows.errors import PermanentError
from flows.kube import read, write
from flows.kube.admission import admission_refusal
from flows.kube.client import Kube
from flows.kube.objects import PodSnapshot, ReplicaSetSnapshot
from flows.kube.portforward import pod_forward, problems_note
from flows.kube.wait import WaitTimedOut, wait_pods, wait_replica_sets
from flows.ledger import REVISION_LABEL, Phase
from flows.render import compute_startup_allowance
from flows.run import HandoffRun
from gates.smoke import run_smoke

NODE_LOOK_S = 5.0  # a node going NotReady changes no pod: look at the nodes this often
FAIL_FAST = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


class CandidateFailed(PermanentError):
    """The candidate's pods cannot become ready; evidence holds events and log lines."""

    def __init__(self, message: str, evidence: str = "") -> None:
        super().__init__(f"{message}\n{evidence}".strip())
        self.evidence = evidence


@dataclass(frozen=True)
class WarmVerdict:
    ready: tuple[str, ...] = ()
    failure: str | None = None
    pod: str | None = None


def decide_created(
    replica_sets: list[ReplicaSetSnapshot], want: int, passing: frozenset[str] = frozenset()
) -> WarmVerdict | None:
    """A ReplicaSet failing to create its pods (for a reason not yet found `passing`),
    done once `want` pods exist, else None. The ReplicaSet names itself in `pod`; whether
    its failure is an admission refusal is asked of the apiserver (flows/kube/admission.py)."""
    for rs in replica_sets:
        if rs.failure and rs.failure not in passing:
            return WarmVerdict(
                failure=f"ReplicaSet {rs.name} cannot create its pods: {rs.failure}", pod=rs.name
            )
    return WarmVerdict() if sum(rs.created for rs in replica_sets) >= want else None


def decide_scheduled(pods: list[PodSnapshot], want: int) -> WarmVerdict | None:
    """While waiting for capacity: done once `want` pods are bound to nodes; every other
    failure still fails at once."""
    live = [p for p in pods if not p.terminating]
    failed = _failure(live, unschedulable_fails=False)
    if failed is not None:
        return failed
    return WarmVerdict() if sum(p.node is not None for p in live) >= want else None


def decide_warm(
    pods: list[PodSnapshot], want: int, not_ready_nodes: Mapping[str, str] | None = None
) -> WarmVerdict | None:
    """Ready, failing (with the reason), or None to keep waiting. `not_ready_nodes`: the
    nodes whose Ready condition is not True, each with that condition in words."""
    live = [p for p in pods if not p.terminating]
    failed = _failure(live, unschedulable_fails=True)
    if failed is not None:
        return failed
    for pod in live:
        condition = (not_ready_nodes or {}).get(pod.node or "")
        if condition is not None:
            return WarmVerdict(
                failure=f"pod {pod.name} is on node {pod.node}, which is NotReady (Ready "
                f"{condition}); its pods cannot become Ready there until the node is back. "
                f"Check the node (kubectl describe node {pod.node}), then run the handoff "
                "again",
                pod=pod.name,
            )
    ready = sorted(p.name for p in live if p.ready)
    return WarmVerdict(ready=tuple(ready[:want])) if len(ready) >= want else None


def _failure(live: list[PodSnapshot], *, unschedulable_fails: bool) -> WarmVerdict | None:
    for pod in live:
        bad = sorted(FAIL_FAST.intersection(pod.waiting_reasons))
        if bad:
            detail = "; ".join(pod.waiting_messages) or "no message"
            return WarmVerdict(
                failure=f"pod {pod.name} is {', '.join(bad)}: {detail}", pod=pod.name
            )
        if pod.restart_count > 0:
            return WarmVerdict(
                failure=f"pod {pod.name} crashed ({pod.last_exit}); restarts: {pod.restart_count}",
                pod=pod.name,
            )
        if pod.unschedulable and unschedulable_fails:
            return WarmVerdict(
                failure=f"pod {pod.name} is Unschedulable: {pod.unschedulable}", pod=pod.name
            )
    return None


def candidate_selector(run: HandoffRun) -> dict[str, str]:
    manifest = run.plan.manifest
    match = manifest["spec"]["selector"].get("matchLabels") or {}
    return {**match, REVISION_LABEL: run.ledger.revision or ""}


def wait_candidate_ready(run: HandoffRun, replicas: int) -> tuple[str, ...]:
    """Scale the candidate to `replicas` and wait for that many Ready pods, failing fast."""
    spec = run.spec
    write.scale_deployment(
        run.kube, spec.namespace, run.candidate_name, replicas, expected=candidate_replicas(run)
    )
    deadline = compute_startup_allowance(run.plan.manifest, spec.candidate.container) + 60.0
    started = time.monotonic()
    refused = wait_created(
        run.kube, spec.namespace, candidate_selector(run), replicas, run.limit(deadline)
    )
    if refused.failure:
        raise CandidateFailed(refused.failure, _events(run, refused.pod))
    if spec.candidate.capacity_wait_s > 0:
        _wait_for_capacity(run, replicas)
    verdict = _follow_candidate(
        run,
        lambda pods: decide_warm(pods, replicas, _not_ready_nodes(run.kube, pods)),
        deadline,
        f"{replicas} Ready pod(s)",
        look_s=NODE_LOOK_S,
    )
    if run.candidate_start_s is None:  # the warm-up's, not the scale-up's
        run.candidate_start_s = round(time.monotonic() - started, 2)
    return verdict.ready


def wait_created(
    kube: Kube, namespace: str, selector: dict[str, str], want: int, deadline_s: float
) -> WarmVerdict:
    """Wait until `want` pods exist; fail at once when admission refuses them (the
    apiserver's status says so), keep waiting through failures it does not confirm."""
    deadline, passing = time.monotonic() + deadline_s, set[str]()
    while True:
        created = wait_replica_sets(
            kube,
            namespace,
            selector,
            decide=lambda replica_sets: decide_created(replica_sets, want, frozenset(passing)),
            deadline_s=max(0.0, deadline - time.monotonic()),
            what=f"{want} pod(s) of {selector} to be created",
        )
        if not created.failure or created.pod is None:
            return created
        refusal = admission_refusal(kube, namespace, created.pod)
        if refusal is not None:
            return WarmVerdict(
                failure=f"{created.failure} (admission refused it: {refusal})", pod=created.pod
            )
        passing.add(
            created.failure.removeprefix(f"ReplicaSet {created.pod} cannot create its pods: ")
        )


def _wait_for_capacity(run: HandoffRun, replicas: int) -> None:
    """Give Unschedulable pods `capacity_wait_s` to be scheduled (a node being added)."""
    spec, wait_s = run.spec, run.spec.candidate.capacity_wait_s
    try:
        _follow_candidate(
            run,
            lambda pods: decide_scheduled(pods, replicas),
            wait_s,
            f"{replicas} scheduled pod(s)",
        )
    except WaitTimedOut:
        pending = [
            p
            for p in read.list_pods(run.kube, spec.namespace, candidate_selector(run))
            if p.unschedulable and not p.terminating
        ]
        pod = pending[0] if pending else None
        raise CandidateFailed(
            f"pod {pod.name if pod else run.candidate_name} is still Unschedulable after "
            f"waiting {wait_s:g} s for capacity (candidate.capacity_wait_s): "
            f"{pod.unschedulable if pod else 'no pod was scheduled'}",
            _evidence(run, pod.name if pod else None),
        ) from None


def _not_ready_nodes(kube: Kube, pods: list[PodSnapshot]) -> dict[str, str]:
    """The NotReady nodes among those `pods` are bound to, with their Ready condition."""
    if not any(p.node for p in pods):
        return {}
    return {n.name: n.condition for n in read.list_nodes(kube) if not n.ready}


def _follow_candidate(
    run: HandoffRun,
    decide: Callable[[list[PodSnapshot]], WarmVerdict | None],
    wait_s: float,
    what: str,
    *,
    look_s: float | None = None,
) -> WarmVerdict:
    """Follow the candidate's pods until `decide` has a verdict; one that fails raises
    CandidateFailed with the failing pod's events and last log lines. With `look_s`,
    `decide` is also asked at least that often (it looks at more than the pods)."""
    deadline = time.monotonic() + run.limit(wait_s)
    while True:
        left = deadline - time.monotonic()
        try:
            verdict = wait_pods(
                run.kube,
                run.spec.namespace,
                candidate_selector(run),
                decide=decide,
                deadline_s=max(0.0, left if look_s is None else min(left, look_s)),
                what=f"{what} of {run.candidate_name}",
            )
            break
        except WaitTimedOut:
            if look_s is None or left <= look_s:
                raise
    if verdict.failure:
        raise CandidateFailed(verdict.failure, _evidence(run, verdict.pod))
    return verdict


def warm(run: HandoffRun) -> tuple[str, ...]:
    """Preview replicas Ready and each answering the smoke gate; returns the pod names.
    A resumed run past this step only looks up the candidate's ready pods."""
    if run.reached(Phase.WARM):
        return tuple(
            sorted(
                p.name
                for p in read.list_pods(run.kube, run.spec.namespace, candidate_selector(run))
                if p.ready and not p.terminating
            )
        )
    pods = wait_candidate_ready(run, run.spec.candidate.preview_replicas)
    for pod in pods:
        with pod_forward(run.kube, run.spec.namespace, pod, run.spec.candidate.port) as forward:
            result = run_smoke(
                forward.url,
                model_id=run.spec.gates.model_id,
                deadline_s=run.limit(run.spec.gates.smoke_deadline_s),
            )
        if not result.passed:
            raise CandidateFailed(
                f"pod {pod} is Ready but does not answer: {result.reason}"
                + problems_note(forward.problems()),
                _evidence(run, pod),
            )
    run.advance(Phase.WARM)
    return pods


def _events(run: HandoffRun, name: str | None) -> str:
    if name is None:
        return ""
    events = "\n".join(f"  {e}" for e in read.recent_events(run.kube, run.spec.namespace, name))
    return f"events of {name}:\n{events or '  (none)'}"


def _evidence(run: HandoffRun, pod: str | None) -> str:
    if pod is None:
        return ""
    ns, container = run.spec.namespace, run.spec.candidate.container
    logs = read.last_log_lines(run.kube, ns, pod, container, lines=10)
    if "no logs" in logs or not logs.strip():
        logs = read.last_log_lines(run.kube, ns, pod, container, lines=10, previous=True)
    indented = "\n".join(f"  {line}" for line in logs.splitlines())
    return f"{_events(run, pod)}\nlast log lines:\n{indented or '  (none)'}"
