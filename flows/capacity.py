"""GPU capacity: the per-node ledger and the strategy it allows. Pure functions.

Ledger: allocatable nvidia.com/gpu minus the requests of every non-terminated pod
bound to the node. Side by side needs the candidate's preview pods to fit in what
is free; in place may also use the cards the current workloads release, at the
price of a declared downtime; otherwise the handoff is refused, with the numbers.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from flows.kube.objects import NodeSnapshot, PodSnapshot


class Strategy(enum.StrEnum):
    SIDE_BY_SIDE = "side-by-side"
    IN_PLACE = "in-place"


class Decision(BaseModel):
    model_config = ConfigDict(frozen=True)

    strategy: Strategy | None  # None: refused
    reasons: list[str]
    scale_after_retire: bool = False


class NodeGpu(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    allocatable: int
    requested: int

    @property
    def free(self) -> int:
        return self.allocatable - self.requested


def compute_gpu_ledger(nodes: Iterable[NodeSnapshot], pods: Iterable[PodSnapshot]) -> list[NodeGpu]:
    usable = [n for n in nodes if n.ready and n.schedulable and n.gpus_allocatable > 0]
    requested = {n.name: 0 for n in usable}
    for pod in pods:
        if pod.node in requested and pod.phase not in ("Succeeded", "Failed"):
            requested[pod.node] += pod.gpus
    return [
        NodeGpu(name=n.name, allocatable=n.gpus_allocatable, requested=requested[n.name])
        for n in usable
    ]


def compute_fit(free: dict[str, int], per_pod: int, count: int) -> bool:
    """Whether `count` pods of `per_pod` GPUs each fit, one node per pod (first fit)."""
    if per_pod == 0:
        return True
    room = sorted(free.values(), reverse=True)
    for _ in range(count):
        for i, value in enumerate(room):
            if value >= per_pod:
                room[i] -= per_pod
                break
        else:
            return False
    return True


def _free_with(ledger: list[NodeGpu], released: Iterable[PodSnapshot]) -> dict[str, int]:
    free = {n.name: n.free for n in ledger}
    for pod in released:
        if pod.node in free and pod.phase not in ("Succeeded", "Failed"):
            free[pod.node] += pod.gpus
    return free


def decide_strategy(
    *,
    same_deployment: bool,
    per_pod: int,
    preview: int,
    target: int,
    ledger: list[NodeGpu],
    current_pods: list[PodSnapshot],
    candidate_pods: list[PodSnapshot],
) -> Decision:
    """Choose side by side, in place, or refuse; every reason carries its numbers."""
    total_free = sum(n.free for n in ledger)
    need = f"{max(preview, target)} pod(s) x {per_pod} GPU"
    alongside = _free_with(ledger, candidate_pods)
    released = _free_with(ledger, [*candidate_pods, *current_pods])
    # Replacing the live Deployment side by side runs a twin for the gates, then the
    # Deployment itself comes up beside the twin: both must fit at once.
    beside = preview + target if same_deployment else preview
    if compute_fit(alongside, per_pod, beside):
        twin = " (as a twin Deployment, then in the live one)" if same_deployment else ""
        reasons = [
            f"side by side{twin}: {beside} pod(s) x {per_pod} GPU fit beside the live "
            f"pods ({total_free} GPU free)"
        ]
        later = not same_deployment and not compute_fit(alongside, per_pod, target)
        if later:
            reasons.append(
                f"target {target} replicas fit only after the old workload retires: "
                "scale-up follows retirement"
            )
        return Decision(strategy=Strategy.SIDE_BY_SIDE, reasons=reasons, scale_after_retire=later)
    why = f"{beside} pod(s) x {per_pod} GPU do not fit beside the live pods ({total_free} GPU free)"
    if compute_fit(released, per_pod, max(preview, target)):
        return Decision(
            strategy=Strategy.IN_PLACE,
            reasons=[
                f"in place: {why}; stopping the current pods frees "
                f"{sum(released.values())} GPU, enough for {need}. The Service has no ready "
                "endpoints from the old pods' stop until the swap: downtime, needs approval"
            ],
        )
    return Decision(
        strategy=None,
        reasons=[
            f"refused: {why}, and even with the current pods stopped only "
            f"{sum(released.values())} GPU would be free "
            f"(per node: {', '.join(f'{k}={v}' for k, v in released.items()) or 'no GPU nodes'}); "
            f"the candidate needs {max(preview, target)} pod(s) x {per_pod} GPU"
        ],
    )
