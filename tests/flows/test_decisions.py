"""Pure decisions, as tables: the GPU ledger and strategy, the ledger's transition
table, the warm verdict, and selector patches. Plain data in, decision out."""

from __future__ import annotations

import pytest

from flows.capacity import NodeGpu, Strategy, compute_fit, compute_gpu_ledger, decide_strategy
from flows.kube.objects import NodeSnapshot, PodSnapshot
from flows.kube.write import selector_patch
from flows.ledger import Phase, can_enter, reached
from flows.warm import decide_warm


def pod(
    name: str,
    *,
    node: str = "worker-1",
    gpus: int = 1,
    ready: bool = False,
    phase: str = "Running",
    waiting: tuple[str, ...] = (),
    restarts: int = 0,
    unschedulable: str | None = None,
    terminating: bool = False,
) -> PodSnapshot:
    return PodSnapshot(
        name=name,
        uid=name,
        labels={},
        node=node,
        phase=phase,
        ready=ready,
        terminating=terminating,
        gpus=gpus,
        restart_count=restarts,
        owner=f"{name}-rs",
        waiting_reasons=list(waiting),
        waiting_messages=[f"{w} message" for w in waiting],
        unschedulable=unschedulable,
        last_exit="Error (exit code 101)",
    )


def test_gpu_ledger_counts_requests_of_live_pods_only() -> None:
    nodes = [
        NodeSnapshot(name="worker-1", ready=True, schedulable=True, gpus_allocatable=4),
        NodeSnapshot(name="cpu-1", ready=True, schedulable=True, gpus_allocatable=0),
        NodeSnapshot(name="down", ready=False, schedulable=True, gpus_allocatable=8),
    ]
    pods = [pod("a"), pod("b", gpus=2), pod("done", phase="Succeeded"), pod("c", node="cpu-1")]
    assert compute_gpu_ledger(nodes, pods) == [NodeGpu(name="worker-1", allocatable=4, requested=3)]


@pytest.mark.parametrize(
    ("free", "per_pod", "count", "fits"),
    [
        ({"a": 1}, 1, 1, True),
        ({"a": 1}, 2, 1, False),
        ({"a": 1, "b": 1}, 2, 1, False),  # two cards on two nodes are not a TP=2 pod
        ({"a": 2, "b": 1}, 1, 3, True),
        ({"a": 4}, 2, 2, True),
        ({"a": 3}, 2, 2, False),
        ({}, 0, 5, True),
    ],
)
def test_fit(free: dict[str, int], per_pod: int, count: int, fits: bool) -> None:
    assert compute_fit(free, per_pod, count) is fits


SEED_LEDGER = [NodeGpu(name="worker-1", allocatable=4, requested=3)]  # one card free


@pytest.mark.parametrize(
    ("case", "same", "per_pod", "current", "strategy"),
    [
        ("clef-candle: 1 GPU, one free", False, 1, [pod("clef-serve")], Strategy.SIDE_BY_SIDE),
        (
            "coder TP=2: two needed, one free + one released",
            False,
            2,
            [pod("coder")],
            Strategy.IN_PLACE,
        ),
        ("same Deployment name", True, 1, [pod("coder")], Strategy.IN_PLACE),
        ("TP=4: nothing can make room", False, 4, [pod("coder")], None),
    ],
)
def test_strategy(
    case: str, same: bool, per_pod: int, current: list[PodSnapshot], strategy: Strategy | None
) -> None:
    decision = decide_strategy(
        same_deployment=same,
        per_pod=per_pod,
        preview=1,
        target=1,
        ledger=SEED_LEDGER,
        current_pods=current,
        candidate_pods=[],
    )
    assert decision.strategy == strategy, case
    assert decision.reasons and all(any(ch.isdigit() for ch in r) for r in decision.reasons)


def test_replacing_the_live_deployment_goes_side_by_side_when_a_twin_fits() -> None:
    """Same Deployment name with room for the twin and the rewritten live pods."""
    roomy = [*SEED_LEDGER, NodeGpu(name="worker-2", allocatable=4, requested=0)]
    decision = decide_strategy(
        same_deployment=True,
        per_pod=2,
        preview=1,
        target=1,
        ledger=roomy,
        current_pods=[pod("coder")],
        candidate_pods=[],
    )
    assert decision.strategy is Strategy.SIDE_BY_SIDE and "twin" in decision.reasons[0]
    tight = [*SEED_LEDGER, NodeGpu(name="worker-2", allocatable=2, requested=0)]
    decision = decide_strategy(
        same_deployment=True,
        per_pod=2,
        preview=1,
        target=1,
        ledger=tight,
        current_pods=[pod("coder")],
        candidate_pods=[],
    )
    assert decision.strategy is Strategy.IN_PLACE


def test_candidate_pods_already_running_count_as_its_own_room() -> None:
    full = [NodeGpu(name="worker-1", allocatable=4, requested=4)]
    decision = decide_strategy(
        same_deployment=False,
        per_pod=1,
        preview=1,
        target=1,
        ledger=full,
        current_pods=[pod("old")],
        candidate_pods=[pod("candidate")],
    )
    assert decision.strategy is Strategy.SIDE_BY_SIDE


def test_target_beyond_free_scales_after_retire() -> None:
    decision = decide_strategy(
        same_deployment=False,
        per_pod=1,
        preview=1,
        target=2,
        ledger=SEED_LEDGER,
        current_pods=[pod("old")],
        candidate_pods=[],
    )
    assert decision.strategy is Strategy.SIDE_BY_SIDE and decision.scale_after_retire


FORWARD = [
    Phase.STARTED,
    Phase.APPLIED,
    Phase.WARM,
    Phase.GATED,
    Phase.APPROVED,
    Phase.SWAPPED,
    Phase.SCALED,
    Phase.RETIRED,
    Phase.DONE,
]


@pytest.mark.parametrize("current", list(Phase))
@pytest.mark.parametrize("target", list(Phase))
def test_transition_table(current: Phase, target: Phase) -> None:
    allowed = can_enter(current, target)
    if current in (Phase.DONE, Phase.ROLLED_BACK):
        assert not allowed
    elif target is Phase.ROLLING_BACK:
        assert allowed
    elif target is Phase.ROLLED_BACK:
        assert allowed is (current is Phase.ROLLING_BACK)
    elif current is Phase.ROLLING_BACK:
        assert not allowed
    else:
        assert allowed is reached(target, current)


def test_reached_is_monotonic() -> None:
    for i, phase in enumerate(FORWARD):
        assert all(reached(phase, earlier) for earlier in FORWARD[: i + 1])
        assert not any(reached(phase, later) for later in FORWARD[i + 1 :])
    assert not reached(Phase.ROLLING_BACK, Phase.STARTED)


@pytest.mark.parametrize(
    ("pods", "want", "ready", "failure"),
    [
        ([pod("a", ready=True)], 1, ("a",), None),
        ([pod("a"), pod("b", ready=True)], 2, None, None),
        ([pod("a", waiting=("CrashLoopBackOff",), restarts=2)], 1, None, "CrashLoopBackOff"),
        ([pod("a", restarts=1)], 1, None, "crashed (Error (exit code 101))"),
        ([pod("a", waiting=("ImagePullBackOff",))], 1, None, "ImagePullBackOff"),
        ([pod("a", waiting=("ErrImagePull",))], 1, None, "ErrImagePull"),
        (
            [pod("a", phase="Pending", unschedulable="0/2 nodes: Insufficient nvidia.com/gpu")],
            1,
            None,
            "Insufficient nvidia.com/gpu",
        ),
        ([pod("old", ready=True, terminating=True)], 1, None, None),
        ([pod("a", waiting=("ContainerCreating",))], 1, None, None),
    ],
)
def test_warm_verdict(
    pods: list[PodSnapshot], want: int, ready: tuple[str, ...] | None, failure: str | None
) -> None:
    verdict = decide_warm(pods, want)
    if ready is None and failure is None:
        assert verdict is None
        return
    assert verdict is not None
    if ready is not None:
        assert verdict.ready == ready and verdict.failure is None
    else:
        assert verdict.failure is not None and failure in verdict.failure


@pytest.mark.parametrize("ready", [False, True])
def test_warm_verdict_fails_a_pod_on_a_not_ready_node(ready: bool) -> None:
    """Once the node controller has marked a candidate pod's node NotReady, the pod cannot
    become (or stay) Ready there: a failure naming the node and its condition."""
    lost = {"worker-2": "Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)"}
    verdict = decide_warm([pod("a", node="worker-2", ready=ready)], 1, lost)
    assert verdict is not None and verdict.failure is not None and verdict.pod == "a"
    assert "pod a is on node worker-2, which is NotReady" in verdict.failure, verdict.failure
    assert "NodeStatusUnknown" in verdict.failure, verdict.failure
    assert decide_warm([pod("a", node="worker-1")], 1, lost) is None
    assert decide_warm([pod("a", node="worker-2", terminating=True)], 1, lost) is None


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        (
            {"app": "clef-serve"},
            {"app": "clef-candle", "handoff.dev/revision": "r1"},
            {"app": "clef-candle", "handoff.dev/revision": "r1"},
        ),
        (
            {"app": "candle-vllm", "handoff.dev/revision": "r1"},
            {"app": "candle-vllm"},
            {"app": "candle-vllm", "handoff.dev/revision": None},
        ),
        ({"a": "1"}, {"a": "1"}, {"a": "1"}),
    ],
)
def test_selector_patch_removes_keys_explicitly(
    old: dict[str, str], new: dict[str, str], patch: dict[str, str | None]
) -> None:
    assert selector_patch(old, new) == patch
