"""Writes one pod's status through the pods/status subresource when it changes.

The body holds what the kubelet owns: phase, the Initialized/ContainersReady/Ready
conditions (PodScheduled, the scheduler's, is kept by the strategic merge), hostIP,
podIP(s), startTime and containerStatuses. Nothing is sent when nothing changed, unless
someone else rewrote a condition the kubelet owns (the node controller marks the pods of a
node it stopped hearing from not Ready): then it is sent again, as the real status
manager's reconcile does, or the pod would stay not Ready after the node came back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from kubernetes import client
from kubernetes.client import V1Pod
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from sandbox.kubelet import podfields
from sandbox.kubelet.context import NodeContext
from sandbox.kubelet.partition import is_partitioned
from sandbox.kubelet.status import (
    Conditions,
    Status,
    now_rfc3339,
    pod_phase,
    readiness_conditions,
    rfc3339,
)

log = logging.getLogger(__name__)
HOST_IP = "127.0.0.1"
_KUBELET_CONDITIONS = ("Initialized", "Ready", "ContainersReady")


class HasStatus(Protocol):
    def status(self) -> Status: ...


class PodStatusWriter:
    def __init__(self, ctx: NodeContext, pod: V1Pod, *, pod_ip: str) -> None:
        status = pod.status or client.V1PodStatus()
        self._core = client.CoreV1Api(ctx.api)
        self._kubelet_dir = ctx.pods_dir.parent
        self._pod_ip = pod_ip
        self.terminal = status.phase in ("Succeeded", "Failed")
        self._conditions = Conditions(
            [
                {
                    "type": c.type,
                    "status": c.status,
                    "lastTransitionTime": rfc3339(c.last_transition_time),
                }
                for c in status.conditions or []
                if c.type in _KUBELET_CONDITIONS
            ]
        )
        self._start_time = rfc3339(status.start_time) or now_rfc3339()
        self._restart_policy = podfields.spec(pod).restart_policy or "Always"
        self._last: Status | None = None
        self._written_over: str | None = None  # the resourceVersion seen when last written

    def write(self, pod: V1Pod, containers: Sequence[HasStatus]) -> bool:
        """Patch the status if it changed; False when the pod no longer exists."""
        statuses = [c.status() for c in containers]
        phase = pod_phase(statuses, self._restart_policy)
        readiness_conditions(self._conditions, statuses, phase)
        body = {
            "status": {
                "phase": phase,
                "conditions": self._conditions.render(_KUBELET_CONDITIONS),
                "hostIP": HOST_IP,
                "podIP": self._pod_ip,
                "podIPs": [{"ip": self._pod_ip}],
                "startTime": self._start_time,
                "containerStatuses": statuses,
            }
        }
        ref = podfields.pod_ref(pod)
        if is_partitioned(self._kubelet_dir, ref.node):
            self._last = None  # posted afresh once the node is back, as a status manager does
            return True
        if body == self._last and not self._overwritten(pod):
            return True
        name, namespace = ref.name, ref.namespace
        try:
            self._core.patch_namespaced_pod_status(name, namespace, body)
        except ApiException as exc:
            if exc.status == 404:
                return False
            log.warning(
                "status of pod %s/%s not written (retried): %s", namespace, name, exc.reason
            )
            return True
        except Urllib3Error as exc:  # the API server is down: post it again next tick
            log.warning("status of pod %s/%s not written (retried): %r", namespace, name, exc)
            return True
        self._last = body
        self._written_over = podfields.resource_version(pod)
        return True

    def _overwritten(self, pod: V1Pod) -> bool:
        """Whether a newer pod object than the one last written over holds other
        statuses for the kubelet's conditions than the ones last written."""
        if self._last is None or podfields.resource_version(pod) == self._written_over:
            return False  # the watch has not yet brought anything newer than our write
        ours = {c["type"]: c["status"] for c in self._last["status"]["conditions"]}
        found = (pod.status and pod.status.conditions) or []
        return {c.type: c.status for c in found if c.type in ours} != ours
