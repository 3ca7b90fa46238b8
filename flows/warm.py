"""Step 4, warm: scale the candidate to its preview count and wait until it serves.

Observes the candidate's pods through a watch; decides with `decide_warm` (pure):
Ready when enough pods are Ready, failed at once on CrashLoopBackOff, a crash,
ImagePullBackOff or Unschedulable, else keep watching. Ready also means answering:
the smoke gate runs against every ready pod through a port-forward. Changes only
the candidate's replica count, so a rerun converges to the same state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from flows.errors import PermanentError
from flows.kube import read, write
from flows.kube.objects import PodSnapshot
from flows.kube.portforward import pod_forward, problems_note
from flows.kube.wait import wait_pods
from flows.ledger import REVISION_LABEL, Phase
from flows.progress import HandoffRun
from flows.render import compute_startup_allowance, load_manifest
from gates.smoke import run_smoke

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


def decide_warm(pods: list[PodSnapshot], want: int) -> WarmVerdict | None:
    """Ready, failing (with the reason), or None to keep waiting."""
    live = [p for p in pods if not p.terminating]
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
        if pod.unschedulable:
            return WarmVerdict(
                failure=f"pod {pod.name} is Unschedulable: {pod.unschedulable}", pod=pod.name
            )
    ready = sorted(p.name for p in live if p.ready)
    return WarmVerdict(ready=tuple(ready[:want])) if len(ready) >= want else None


def candidate_selector(run: HandoffRun) -> dict[str, str]:
    manifest = load_manifest(run.spec)
    match = manifest["spec"]["selector"].get("matchLabels") or {}
    return {**match, REVISION_LABEL: run.ledger.revision or ""}


def wait_candidate_ready(run: HandoffRun, replicas: int) -> tuple[str, ...]:
    """Scale the candidate to `replicas` and wait for that many Ready pods, failing fast."""
    spec = run.spec
    write.scale_deployment(run.kube, spec.namespace, run.candidate_name, replicas)
    deadline = compute_startup_allowance(load_manifest(spec), spec.candidate.container) + 60.0
    started = time.monotonic()
    verdict = wait_pods(
        run.kube,
        spec.namespace,
        candidate_selector(run),
        decide=lambda pods: decide_warm(pods, replicas),
        deadline_s=run.limit(deadline),
        what=f"{replicas} Ready pod(s) of {run.candidate_name}",
    )
    if verdict.failure:
        raise CandidateFailed(verdict.failure, _evidence(run, verdict.pod))
    run.evidence.setdefault("candidate_start_s", round(time.monotonic() - started, 2))
    return verdict.ready


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


def _evidence(run: HandoffRun, pod: str | None) -> str:
    if pod is None:
        return ""
    ns, container = run.spec.namespace, run.spec.candidate.container
    events = "\n".join(f"  {e}" for e in read.recent_events(run.kube, ns, pod))
    logs = read.last_log_lines(run.kube, ns, pod, container, lines=10)
    if "no logs" in logs or not logs.strip():
        logs = read.last_log_lines(run.kube, ns, pod, container, lines=10, previous=True)
    indented = "\n".join(f"  {line}" for line in logs.splitlines())
    return f"events of {pod}:\n{events or '  (none)'}\nlast log lines:\n{indented or '  (none)'}"
