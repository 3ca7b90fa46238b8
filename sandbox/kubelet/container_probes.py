"""The probes of one container run, and what they mean for started, ready and restart.

A container without a startupProbe counts as started once running; without a
readinessProbe it is ready once started. Liveness and readiness wait for the startup
probe to succeed. Each run gets fresh probe workers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kubernetes.client import V1Container, V1Probe

from sandbox.kubelet.context import NodeContext
from sandbox.kubelet.events import PodRef
from sandbox.kubelet.probes import ProbeKind, ProbeTarget, ProbeWorker, container_port


class ContainerProbes:
    def __init__(
        self,
        ctx: NodeContext,
        pod: PodRef,
        container: V1Container,
        *,
        pod_ip: str,
        wake: Callable[[], None],
    ) -> None:
        self._ctx, self._pod, self._container = ctx, pod, container
        self._pod_ip, self._wake = pod_ip, wake
        self._local_port = 0
        self._workers: dict[ProbeKind, ProbeWorker] = {}
        self._started = threading.Event()

    def start(self, local_port: int) -> None:
        """Start the probes of a new run, whose process listens on ``local_port``."""
        self.stop()
        self._local_port = local_port
        self._started = threading.Event()
        specs = {
            ProbeKind.STARTUP: self._container.startup_probe,
            ProbeKind.READINESS: self._container.readiness_probe,
            ProbeKind.LIVENESS: self._container.liveness_probe,
        }
        if specs[ProbeKind.STARTUP] is None:
            self._started.set()
        self._workers = {
            kind: self._worker(kind, probe).start()
            for kind, probe in specs.items()
            if probe is not None
        }

    def stop(self) -> None:
        for worker in self._workers.values():
            worker.stop()

    @property
    def started(self) -> bool:
        return self._started.is_set()

    @property
    def ready(self) -> bool:
        readiness = self._workers.get(ProbeKind.READINESS)
        return self.started and (readiness is None or readiness.result is True)

    def failed(self) -> str | None:
        """ "startup" or "liveness" when that probe calls for a restart, else None."""
        for kind in (ProbeKind.STARTUP, ProbeKind.LIVENESS):
            worker = self._workers.get(kind)
            if worker is not None and worker.failed:
                return kind.name.lower()
        return None

    def _worker(self, kind: ProbeKind, probe: V1Probe) -> ProbeWorker:
        started = self._started

        def changed() -> None:
            if kind is ProbeKind.STARTUP and worker.result is True:
                started.set()
            self._wake()

        worker = ProbeWorker(
            kind=kind,
            probe=probe,
            target=self._target(probe),
            on_failure=self._unhealthy,
            on_change=changed,
            gate=None if kind is ProbeKind.STARTUP else started,
        )
        return worker

    def _target(self, probe: V1Probe) -> ProbeTarget:
        action = probe.http_get or probe.tcp_socket
        port = container_port(self._container, action.port) if action is not None else 0
        return ProbeTarget(local_port=self._local_port, pod_ip=self._pod_ip, port=port)

    def _unhealthy(self, message: str) -> None:
        self._ctx.events.warning(self._pod, "Unhealthy", message, container=self._container.name)
