"""Pod status as the kubelet computes it: phase, conditions, timestamps, durations.

Pure functions over container statuses (API-shaped dicts), except the clock in
``now_rfc3339``. ``Conditions`` keeps a condition's lastTransitionTime unless its status
actually changes, as the kubelet's status manager does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.client import V1ContainerStatus

Status = dict[str, Any]


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def go_duration(seconds: float) -> str:
    """Format as Go's time.Duration prints: 250ms, 1.5s, 5m0s."""
    if seconds < 1:
        return f"{round(seconds * 1000, 3):g}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{round(rest, 6):g}s"
    return f"{int(minutes)}m{text}" if minutes else text


def pod_phase(containers: Sequence[Status], restart_policy: str) -> str:
    """The pod phase from its container statuses (kubelet getPhase, no init containers)."""
    running = waiting = stopped = succeeded = 0
    for c in containers:
        state = c.get("state") or {}
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"].get("exitCode") == 0
        elif "terminated" in (c.get("lastState") or {}):
            stopped += 1  # waiting to restart after an exit
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if not stopped:
        return "Pending"
    if restart_policy == "Always":
        return "Running"
    if stopped == succeeded:
        return "Succeeded"
    return "Running" if restart_policy == "OnFailure" else "Failed"


class Conditions:
    """Pod conditions with transition times that move only on transitions."""

    def __init__(self, existing: Sequence[Mapping[str, Any]] = ()) -> None:
        self._by_type: dict[str, Status] = {c["type"]: dict(c) for c in existing}

    def set(
        self, kind: str, ok: bool, *, reason: str | None = None, message: str | None = None
    ) -> None:
        status = "True" if ok else "False"
        previous = self._by_type.get(kind)
        if previous is not None and previous.get("status") == status:
            since = previous["lastTransitionTime"]
        else:
            since = now_rfc3339()
        self._by_type[kind] = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        }

    def get(self, kind: str) -> Status | None:
        return self._by_type.get(kind)

    def render(self, kinds: Sequence[str]) -> list[Status]:
        return [self._by_type[k] for k in kinds if k in self._by_type]


def readiness_conditions(conditions: Conditions, containers: Sequence[Status], phase: str) -> None:
    """Initialized, ContainersReady and Ready from the containers' ready flags."""
    conditions.set("Initialized", True)
    unready = [c["name"] for c in containers if not c.get("ready")]
    reason: str | None
    message: str | None
    if phase == "Succeeded":
        reason, message = "PodCompleted", None
    elif unready:
        reason = "ContainersNotReady"
        message = f"containers with unready status: [{' '.join(unready)}]"
    else:
        reason = message = None
    conditions.set("ContainersReady", not unready, reason=reason, message=message)
    conditions.set("Ready", not unready, reason=reason, message=message)


def restored_state(prior: V1ContainerStatus | None) -> tuple[int, Status, bool]:
    """(restartCount, lastState, has run before) from a status an earlier kubelet wrote.

    A container that was running when the kubelet died died with it (SIGKILL, 137).
    """
    if prior is None:
        return 0, {}, False
    state, last = prior.state, prior.last_state
    if state is not None and state.running is not None:
        terminated = {
            "exitCode": 137,
            "reason": "Error",
            "finishedAt": now_rfc3339(),
            "startedAt": rfc3339(state.running.started_at),
            "containerID": prior.container_id,
        }
        return prior.restart_count or 0, {"terminated": terminated}, True
    earlier = state.terminated if state is not None else None
    if earlier is None and last is not None:
        earlier = last.terminated
    if earlier is None:
        return prior.restart_count or 0, {}, bool(prior.restart_count)
    terminated = {
        "exitCode": earlier.exit_code,
        "reason": earlier.reason,
        "startedAt": rfc3339(earlier.started_at),
        "finishedAt": rfc3339(earlier.finished_at),
        "containerID": earlier.container_id,
    }
    return prior.restart_count or 0, {"terminated": terminated}, True


def rfc3339(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value else None
