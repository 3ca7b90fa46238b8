"""A container's ``lifecycle.preStop`` hook: run before SIGTERM when its pod is deleted.

As the kubelet does, the hook runs within the pod's grace period and SIGTERM follows once
it ends; a hook still running when the grace period is over is abandoned (an exec hook's
process is killed) and the container gets SIGTERM with at least ``MIN_GRACE_S`` left.
While it runs, a terminating pod is already out of its Service's endpoints, so a hook
that sleeps lets open requests finish before the server is told to stop.

``exec`` runs the command as a process of the node (the sandbox has no container
filesystem; ``sleep`` and ``sh`` are the host's), logged to ``prestop.log`` beside the
container's logs; ``httpGet`` asks the container's own port on 127.0.0.1. A hook that
fails is reported as the event FailedPreStopHook and the stop goes on.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
from kubernetes.client import V1Container, V1HTTPGetAction, V1LifecycleHandler

from sandbox.kubelet.context import NodeContext
from sandbox.kubelet.events import PodRef
from sandbox.kubelet.probes import container_port
from sandbox.kubelet.spawner import ContainerProcess

MIN_GRACE_S = 2.0  # the kubelet's minimum after a hook that used up the grace period


class PreStopHook:
    """One run of a container's preStop hook; ``step`` until ``done``."""

    def __init__(
        self,
        ctx: NodeContext,
        pod: PodRef,
        container: V1Container,
        *,
        ports: dict[int, int],
        log: Path,
    ) -> None:
        self._ctx, self._pod, self._container = ctx, pod, container
        self._ports, self._log = ports, log
        self._proc: ContainerProcess | None = None
        self._thread: threading.Thread | None = None
        self._deadline = 0.0
        self.done = False

    @staticmethod
    def handler(container: V1Container) -> V1LifecycleHandler | None:
        lifecycle = container.lifecycle
        return lifecycle.pre_stop if lifecycle is not None else None

    def start(self, now: float, grace_s: float) -> None:
        handler = self.handler(self._container)
        self._deadline = now + grace_s
        if handler is None:
            self.done = True
        elif handler._exec is not None and handler._exec.command:
            self._start_exec(handler._exec.command)
        elif handler.http_get is not None:
            self._thread = threading.Thread(
                target=self._http_get, args=(handler.http_get,), daemon=True
            )
            self._thread.start()
        else:
            self._failed("the sandbox kubelet runs exec and httpGet preStop hooks only")
            self.done = True

    def step(self, now: float) -> None:
        if self.done:
            return
        if self._proc is not None:
            code = self._proc.poll()
            if code is not None:
                if code != 0:
                    self._failed(f"command exited with {code}; see {self._log}")
                self.done = True
        elif self._thread is not None and not self._thread.is_alive():
            self.done = True
        if not self.done and now >= self._deadline:
            if self._proc is not None:
                self._proc.signal(signal.SIGKILL)
            self._failed(f"still running when the grace period ended at {self._deadline:.1f}")
            self.done = True

    def remaining_grace(self, now: float) -> float:
        """SIGTERM's grace once the hook is done: what is left of the pod's, at least 2 s."""
        return max(self._deadline - now, MIN_GRACE_S)

    def _start_exec(self, command: list[str]) -> None:
        name = f"{self._pod.namespace}/{self._pod.name}/{self._container.name}/preStop"
        try:
            self._proc = self._ctx.spawner.spawn(name, list(command), log=self._log)
        except Exception as exc:  # e.g. no such executable on the node
            self._failed(f"command {command} could not start: {exc}")
            self.done = True

    def _http_get(self, action: V1HTTPGetAction) -> None:
        port = container_port(self._container, action.port)
        url = f"http://127.0.0.1:{self._ports.get(port, port)}{action.path or '/'}"
        timeout = max(self._deadline - time.monotonic(), 0.1)
        try:
            answer = httpx.get(url, timeout=timeout)
            if answer.status_code >= 400:
                self._failed(f"GET {action.path} answered HTTP {answer.status_code}")
        except httpx.HTTPError as exc:
            self._failed(f"GET {action.path} on container port {port} failed: {exc}")

    def _failed(self, why: str) -> None:
        self._ctx.events.warning(
            self._pod,
            "FailedPreStopHook",
            f"PreStopHook of container {self._container.name} failed: {why}",
            container=self._container.name,
        )
