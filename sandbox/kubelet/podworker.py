"""One pod bound to this node, from its first sync until its object is gone.

A thread steps the pod's containers every TICK_S (or when woken by a pod update or a
probe), publishes the table entry and, when it changed, the pod status through the
pods/status subresource. When the pod gets a deletionTimestamp its containers run their
preStop hooks, then get SIGTERM, SIGKILL once the grace period is over, and the kubelet
then deletes the object with grace 0 and a uid precondition, as the real status manager
does. If the kubelet itself stops, the processes stop (no hooks) and the API is left as
it is.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable

from kubernetes import client
from kubernetes.client import V1Pod
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from sandbox.kubelet.container import ContainerRunner
from sandbox.kubelet.context import NodeContext
from sandbox.kubelet.pod_status import PodStatusWriter
from sandbox.kubelet.podfields import metadata, pod_ref, spec
from sandbox.kubelet.runtime import RunningPod

log = logging.getLogger(__name__)
TICK_S = 0.1
GONE_GRACE_S = 2.0  # a pod deleted without a graceful deletion still gets SIGTERM first
DELETE_ATTEMPTS = 120  # 1 s apart: an API server restarted under load takes a while


class PodWorker:
    def __init__(self, ctx: NodeContext, pod: V1Pod, *, on_exit: Callable[[str], None]) -> None:
        self._ctx, self._pod, self._on_exit = ctx, pod, on_exit
        self.ref = ref = pod_ref(pod)
        self._log_root = ctx.pods_dir / f"{ref.namespace}_{ref.name}_{ref.uid}"
        self._wake = threading.Event()
        self._gone = False
        self._shutdown_grace: float | None = None
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"pod-{ref.namespace}/{ref.name}"
        )

    def start(self) -> PodWorker:
        self._thread.start()
        return self

    def update(self, pod: V1Pod) -> None:
        self._pod = pod
        self._wake.set()

    def gone(self) -> None:
        """The pod object was deleted: stop its processes, write nothing more."""
        self._gone = True
        self._wake.set()

    def shutdown(self, grace_s: float) -> None:
        """The kubelet stops: stop the processes within ``grace_s``, write nothing more."""
        self._shutdown_grace = grace_s
        self._wake.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            self._live()
        except Exception:
            log.exception("pod worker %s/%s failed", self.ref.namespace, self.ref.name)
        finally:
            self._ctx.table.remove(self.ref.namespace, self.ref.name, self.ref.uid)
            self._ctx.ips.release(self.ref.uid)
            self._ctx.events.forget(self.ref.uid)
            self._on_exit(self.ref.uid)

    def _live(self) -> None:
        pod = self._pod
        pod_ip = self._ctx.ips.claim(self.ref.uid, pod.status.pod_ip if pod.status else None)
        writer = PodStatusWriter(self._ctx, pod, pod_ip=pod_ip)
        runners = self._runners(pod, pod_ip)
        if writer.terminal:  # finished before this kubelet started: run nothing again
            for runner in runners:
                runner.stop(time.monotonic(), 0)
        self._sync_until_stopped(runners, writer, pod_ip)
        # Nothing of the pod runs any more: forget it and its logs before its object goes.
        self._ctx.table.remove(self.ref.namespace, self.ref.name, self.ref.uid)
        if self._shutdown_grace is not None:
            return  # the pod lives on; a restarted kubelet resumes it
        shutil.rmtree(self._log_root, ignore_errors=True)
        if not self._gone:
            writer.write(self._pod, runners)
            self._delete()

    def _sync_until_stopped(
        self, runners: list[ContainerRunner], writer: PodStatusWriter, pod_ip: str
    ) -> None:
        stopping = False
        while True:
            now = time.monotonic()
            grace = self._stop_grace()
            if grace is not None and not stopping:
                stopping = True
                # preStop hooks run when the pod is deleted, not when the kubelet stops
                for runner in runners:
                    runner.stop(now, grace, pre_stop=self._shutdown_grace is None)
            for runner in runners:
                runner.step(now)
            self._publish(pod_ip, runners)
            if not self._gone and self._shutdown_grace is None and not writer.terminal:
                self._gone = not writer.write(self._pod, runners)
            if stopping and all(r.stopped for r in runners):
                return
            self._wake.wait(TICK_S)
            self._wake.clear()

    def _runners(self, pod: V1Pod, pod_ip: str) -> list[ContainerRunner]:
        prior = {c.name: c for c in (pod.status and pod.status.container_statuses) or []}
        root, pod_spec = self._log_root, spec(pod)
        return [
            ContainerRunner(
                self._ctx,
                self.ref,
                pod_spec,
                c,
                pod_ip=pod_ip,
                log_dir=root / c.name,
                wake=self._wake.set,
                prior=prior.get(c.name),
            )
            for c in pod_spec.containers
        ]

    def _stop_grace(self) -> float | None:
        """Seconds to stop within, once the pod is deleted or the kubelet stops; else None."""
        if self._shutdown_grace is not None:
            return self._shutdown_grace
        if self._gone:
            return GONE_GRACE_S
        meta = metadata(self._pod)
        if meta.deletion_timestamp is None:
            return None
        grace = meta.deletion_grace_period_seconds
        if grace is None:
            grace = spec(self._pod).termination_grace_period_seconds
        return 30.0 if grace is None else float(grace)

    def _publish(self, pod_ip: str, runners: list[ContainerRunner]) -> None:
        entry = RunningPod(
            uid=self.ref.uid,
            pod_ip=pod_ip,
            node=self.ref.node,
            containers={r.name: r.runtime() for r in runners},
        )
        if self._ctx.table.lookup(self.ref.namespace, self.ref.name) != entry:
            self._ctx.table.put(self.ref.namespace, self.ref.name, entry)

    def _delete(self) -> None:
        """Remove the stopped pod's object: grace 0, only if it is still this uid."""
        body = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=self.ref.uid)
        )
        core = client.CoreV1Api(self._ctx.api)
        for attempt in range(DELETE_ATTEMPTS):
            try:
                core.delete_namespaced_pod(self.ref.name, self.ref.namespace, body=body)
                return
            except ApiException as exc:
                if exc.status in (404, 409):  # gone already, or the name has a new uid
                    return
                reason = exc.reason
            except Urllib3Error as exc:  # the API server is down: try again
                reason = repr(exc)
            log.warning(
                "pod %s/%s not deleted (attempt %d): %s",
                self.ref.namespace,
                self.ref.name,
                attempt + 1,
                reason,
            )
            if self._wake.wait(1.0) and self._shutdown_grace is not None:
                return
