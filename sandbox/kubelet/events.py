"""Pod events as the kubelet posts them (source kubelet, host = node), aggregated.

A repeat of the same reason and message for the same pod and container bumps the first
event's count and lastTimestamp instead of creating another, as client-go's event
correlator does, so a crash loop or a failing probe yields one event with a count.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str
    node: str


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Posts core/v1 Events about pods; thread-safe."""

    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str, str, str], tuple[str, int]] = {}

    def normal(self, pod: PodRef, reason: str, message: str, *, container: str = "") -> None:
        self._record(pod, "Normal", reason, message, container)

    def warning(self, pod: PodRef, reason: str, message: str, *, container: str = "") -> None:
        self._record(pod, "Warning", reason, message, container)

    def forget(self, uid: str) -> None:
        with self._lock:
            for key in [k for k in self._seen if k[0] == uid]:
                del self._seen[key]

    def _record(self, pod: PodRef, kind: str, reason: str, message: str, container: str) -> None:
        field_path = f"spec.containers{{{container}}}" if container else ""
        key = (pod.uid, field_path, reason, message)
        try:
            with self._lock:
                seen = self._seen.get(key)
                if seen is None or not self._bump(pod, *seen):
                    name = f"{pod.name}.{time.time_ns():x}"
                    self._create(pod, name, kind, reason, message, field_path)
                    seen = (name, 0)
                self._seen[key] = (seen[0], seen[1] + 1)
        except ApiException as exc:
            # A namespace being deleted refuses new events; nobody is left to read them.
            if exc.status not in (403, 404, 409):
                log.warning(
                    "event %s for pod %s/%s not posted: %s",
                    reason,
                    pod.namespace,
                    pod.name,
                    exc.reason,
                )
        except Urllib3Error as exc:  # the API server is down: an event is not worth a retry
            log.warning(
                "event %s for pod %s/%s not posted: %r", reason, pod.namespace, pod.name, exc
            )

    def _bump(self, pod: PodRef, name: str, count: int) -> bool:
        body = {"count": count + 1, "lastTimestamp": _now()}
        try:
            self._core.patch_namespaced_event(name, pod.namespace, body)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _create(
        self, pod: PodRef, name: str, kind: str, reason: str, message: str, field_path: str
    ) -> None:
        now = _now()
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
        }
        if field_path:
            involved["fieldPath"] = field_path
        event = {
            "metadata": {"name": name, "namespace": pod.namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": pod.node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": pod.node,
        }
        # The client sends a dict body as it is; its annotation names only the model.
        self._core.create_namespaced_event(pod.namespace, event)  # type: ignore[arg-type]
