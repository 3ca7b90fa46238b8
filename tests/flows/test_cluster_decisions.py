"""Pure decisions on what the cluster shows, as tables: whether the candidate's pods were
created or refused, whether they are scheduled while waiting for capacity, which live pod
is the latency baseline (by owner and revision, never by label) and on which port, and
whether a Service's routes lead only to the wanted pods."""

from __future__ import annotations

from typing import Any

import pytest

from flows.baseline import (
    BaselineError,
    PodIdentity,
    compute_live_port,
    decide_baseline_pod,
    describe_design,
)
from flows.kube.objects import (
    DeploymentSnapshot,
    EndpointsSnapshot,
    PodSnapshot,
    ReplicaSetSnapshot,
    ServicePort,
)
from flows.swap import decide_routes_only
from flows.warm import decide_created, decide_scheduled


def rs(
    name: str, *, created: int = 1, failure: str | None = None, owner: str = "live", rev: str = "2"
) -> ReplicaSetSnapshot:
    return ReplicaSetSnapshot(
        name=name,
        uid=f"uid-{name}",
        owner_uid=f"uid-{owner}",
        owner=owner,
        revision=rev,
        replicas=1,
        created=created,
        failure=failure,
    )


def pod(
    name: str, owner: str, *, ready: bool = True, node: str | None = "worker-1", **extra: Any
) -> PodSnapshot:
    return PodSnapshot(
        name=name,
        uid=name,
        labels={"app": "clef-serve"},
        node=node,
        phase="Running",
        ready=ready,
        terminating=extra.pop("terminating", False),
        gpus=1,
        restart_count=0,
        owner=owner,
        owner_uid=f"uid-{owner}",
        **extra,
    )


QUOTA = 'pods "c-x" is forbidden: exceeded quota: gpus'


@pytest.mark.parametrize(
    ("replica_sets", "want", "outcome"),
    [
        ([rs("c", created=1)], 1, "created"),
        ([rs("c", created=0)], 1, None),
        ([], 1, None),
        ([rs("c", created=1)], 2, None),
        (
            [rs("c", created=0, failure=f"FailedCreate: {QUOTA}")],
            1,
            f"ReplicaSet c cannot create its pods: FailedCreate: {QUOTA}",
        ),
        ([rs("c", created=1, failure=f"FailedCreate: {QUOTA}")], 2, "exceeded quota"),
        # worded as no refusal is: still a failure to ask the apiserver about
        ([rs("c", created=0, failure="FailedCreate: denied: no GPUs today")], 1, "no GPUs"),
        # once the apiserver admitted a pod like it, the same failure is waited through
        ([rs("c", created=0, failure="FailedCreate: etcdserver: request timed out")], 1, None),
    ],
)
def test_created_verdict(
    replica_sets: list[ReplicaSetSnapshot], want: int, outcome: str | None
) -> None:
    passing = frozenset({"FailedCreate: etcdserver: request timed out"})
    verdict = decide_created(replica_sets, want, passing)
    if outcome is None:
        assert verdict is None
    elif outcome == "created":
        assert verdict is not None and verdict.failure is None
    else:
        assert verdict is not None and verdict.failure and outcome in verdict.failure


@pytest.mark.parametrize(
    ("pods", "want", "outcome"),
    [
        ([pod("a", "c", ready=False, node=None, unschedulable="0/3 nodes")], 1, None),
        ([pod("a", "c", ready=False)], 1, "scheduled"),
        ([pod("a", "c", ready=False, waiting_reasons=["ImagePullBackOff"])], 1, "ImagePullBackOff"),
        ([pod("a", "c", node=None, terminating=True), pod("b", "c", node=None)], 1, None),
    ],
)
def test_scheduled_verdict(pods: list[PodSnapshot], want: int, outcome: str | None) -> None:
    verdict = decide_scheduled(pods, want)
    if outcome is None:
        assert verdict is None
    elif outcome == "scheduled":
        assert verdict is not None and verdict.failure is None
    else:
        assert verdict is not None and verdict.failure and outcome in verdict.failure


def live(revision: str = "2") -> DeploymentSnapshot:
    return DeploymentSnapshot(
        name="live",
        namespace="ns",
        uid="uid-live",
        resource_version="1",
        generation=1,
        observed_generation=1,
        replicas=1,
        ready_replicas=1,
        updated_replicas=1,
        selector={"app": "clef-serve"},
        template_labels={"app": "clef-serve"},
        gpus_per_pod=1,
        images={},
        annotations={"deployment.kubernetes.io/revision": revision},
        spec={},
    )


@pytest.mark.parametrize(
    ("replica_sets", "pods", "expected"),
    [
        # The candidate's pod shares the label and sorts first: never picked.
        ([rs("live-new"), rs("cand", owner="cand")], [pod("a", "cand"), pod("b", "live-new")], "b"),
        # An older revision's pod (mid-rollout) is not the live workload's current one.
        (
            [rs("live-old", rev="1"), rs("live-new")],
            [pod("a", "live-old"), pod("b", "live-new")],
            "b",
        ),
        ([rs("live-new")], [pod("a", "live-new", ready=False)], None),
        ([rs("live-new")], [pod("a", "live-new", terminating=True)], None),
        ([rs("cand", owner="cand")], [pod("a", "cand")], None),
    ],
)
def test_baseline_pod_by_owner_and_revision(
    replica_sets: list[ReplicaSetSnapshot], pods: list[PodSnapshot], expected: str | None
) -> None:
    found = decide_baseline_pod(live(), replica_sets, pods)
    assert (found[1].name if found else None) == expected


def template(*ports: tuple[str, int]) -> dict[str, Any]:
    declared = [{"name": n, "containerPort": p} if n else {"containerPort": p} for n, p in ports]
    return {"spec": {"containers": [{"name": "c", "ports": declared}]}}


@pytest.mark.parametrize(
    ("service_ports", "candidate", "live_template", "expected"),
    [
        (
            [ServicePort(port=80, target_port="http")],
            template(("http", 8080)),
            template(("http", 8000)),
            8000,
        ),
        (
            [ServicePort(port=80, target_port=8080)],
            template(("", 8080)),
            template(("", 8080)),
            8080,
        ),
        # The Service does not lead to the candidate's port: the live pods' only port.
        (
            [ServicePort(port=80, target_port=9000)],
            template(("", 8080)),
            template(("", 8000)),
            8000,
        ),
        ([], template(("", 8080)), template(("", 8000)), 8000),
        ([], template(("", 8080)), template(("a", 8000), ("b", 9000)), BaselineError),
        (
            [ServicePort(port=80, target_port="http")],
            template(("http", 8080)),
            template(("web", 8000), ("metrics", 9000)),
            BaselineError,
        ),
    ],
)
def test_live_port(
    service_ports: list[ServicePort],
    candidate: dict[str, Any],
    live_template: dict[str, Any],
    expected: int | type[Exception],
) -> None:
    def compute() -> int:
        return compute_live_port(
            service_ports=service_ports,
            candidate_template=candidate,
            candidate_port=8080,
            live_template=live_template,
        )

    if isinstance(expected, int):
        assert compute() == expected
    else:
        with pytest.raises(expected):
            compute()


def routes(ready: list[str], not_ready: list[str] | None = None) -> EndpointsSnapshot:
    return EndpointsSnapshot(ready_pods=ready, not_ready_pods=not_ready or [])


@pytest.mark.parametrize(
    ("items", "ok"),
    [
        ([routes(["new-1"])], True),
        ([routes(["new-1"]), routes(["new-2"])], True),
        ([routes(["new-1"]), routes(["old-1"])], None),  # another slice still routes to old
        ([routes(["new-1"], ["new-2"])], True),  # a wanted pod not ready gets no traffic
        ([routes(["new-1"], ["old-1"])], None),  # still lists a pod of the old selector
        ([routes([], ["new-1"])], None),  # nothing ready to route to
        ([routes([])], None),
        ([], None),
    ],
)
def test_routes_only_to_wanted(items: list[EndpointsSnapshot], ok: bool | None) -> None:
    assert decide_routes_only(items, {"new-1", "new-2"}) is ok


def _side(pod: str, node: str | None, gpus: int) -> PodIdentity:
    return PodIdentity(
        pod=pod, replica_set="rs", deployment=pod, revision="1", port=8000, node=node, gpus=gpus
    )


def test_the_latency_report_says_which_design_ran_and_whether_the_pods_share_a_node() -> None:
    shared = describe_design(_side("live", "worker-1", 2), _side("cand", "worker-1", 1))
    assert shared.startswith("alternating rounds, never both sides under load at once")
    assert "both pods run on node `worker-1` (2 + 1 GPUs requested" in shared
    apart = describe_design(_side("live", "worker-1", 2), _side("cand", "worker-2", 1))
    assert "different nodes (`worker-1`, `worker-2`)" in apart
    unknown = describe_design(_side("live", None, 0), _side("cand", "worker-2", 1))
    assert "where one of the pods runs is not known" in unknown
    assert "on node `worker-2` (1 GPU)" in _side("cand", "worker-2", 1).describe()
