"""Pods bound to this kubelet's nodes: a watch per node feeding one worker per pod.

Each node's watch lists the pods with ``spec.nodeName=<node>`` and then watches from
the list's resourceVersion, as a kubelet's pod config source does; an expired watch
(410 Gone) or a broken connection leads to a fresh list, which is reconciled against
the running workers so no deletion is missed.
"""

from __future__ import annotations

import logging
import threading

from kubernetes import client, watch
from kubernetes.client import V1Pod
from kubernetes.client.exceptions import ApiException

from sandbox.kubelet import podfields
from sandbox.kubelet.context import NodeContext
from sandbox.kubelet.podworker import PodWorker

log = logging.getLogger(__name__)
WATCH_TIMEOUT_S = 300


class PodManager:
    """One worker per pod uid; thread-safe."""

    def __init__(self, ctx: NodeContext) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self._workers: dict[str, PodWorker] = {}
        self._finished: set[str] = set()  # uids whose worker is done: late events are stale
        self._stopping = False

    def upsert(self, pod: V1Pod) -> None:
        pod_uid = podfields.uid(pod)
        with self._lock:
            if self._stopping or pod_uid in self._finished:
                return
            worker = self._workers.get(pod_uid)
            if worker is None:
                self._workers[pod_uid] = PodWorker(self._ctx, pod, on_exit=self._exited).start()
                return
        worker.update(pod)

    def delete(self, pod: V1Pod) -> None:
        pod_uid = podfields.uid(pod)
        with self._lock:
            self._finished.discard(pod_uid)  # no event follows a deletion
            worker = self._workers.get(pod_uid)
        if worker is not None:
            worker.gone()

    def resync(self, node: str, pods: list[V1Pod]) -> None:
        """Make the workers of ``node`` match a fresh list of its pods."""
        listed = {podfields.uid(p) for p in pods}
        with self._lock:
            stale = [
                w for uid, w in self._workers.items() if w.ref.node == node and uid not in listed
            ]
        for worker in stale:
            worker.gone()
        for pod in pods:
            self.upsert(pod)

    def shutdown(self, grace_s: float) -> None:
        """Stop every pod's processes within ``grace_s`` (the API is left as it is)."""
        with self._lock:
            self._stopping = True
            workers = list(self._workers.values())
        for worker in workers:
            worker.shutdown(grace_s)
        for worker in workers:
            worker.join(grace_s + 2.0)

    def _exited(self, uid: str) -> None:
        with self._lock:
            self._workers.pop(uid, None)
            self._finished.add(uid)


def watch_node_pods(
    ctx: NodeContext, manager: PodManager, node: str, stop: threading.Event
) -> None:
    """List, then watch, the pods bound to ``node`` until ``stop`` is set."""
    core = client.CoreV1Api(ctx.api)
    selector = f"spec.nodeName={node}"
    while not stop.is_set():
        try:
            listed = core.list_pod_for_all_namespaces(field_selector=selector)
            manager.resync(node, listed.items)
            _follow(core, manager, selector, podfields.list_version(listed), stop)
        except ApiException as exc:
            if exc.status != 410:
                log.warning("pod watch for node %s failed (%s); listing again", node, exc.reason)
                stop.wait(1.0)
        except Exception as exc:  # a dropped connection: list again, as a kubelet would
            log.warning("pod watch for node %s broke (%r); listing again", node, exc)
            stop.wait(1.0)


def _follow(
    core: client.CoreV1Api, manager: PodManager, selector: str, version: str, stop: threading.Event
) -> None:
    while not stop.is_set():
        stream = watch.Watch()
        for event in stream.stream(
            core.list_pod_for_all_namespaces,
            field_selector=selector,
            resource_version=version,
            timeout_seconds=WATCH_TIMEOUT_S,
        ):
            if stop.is_set():
                return
            pod = event["object"]
            version = podfields.resource_version(pod)
            if event["type"] == "DELETED":
                manager.delete(pod)
            elif event["type"] in ("ADDED", "MODIFIED"):
                manager.upsert(pod)
        version = stream.resource_version or version
