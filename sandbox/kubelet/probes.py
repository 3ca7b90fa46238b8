"""Startup, readiness and liveness probes of one container run, as the kubelet runs them.

One thread per probe, from the container's start: wait initialDelaySeconds, then every
periodSeconds one check with timeoutSeconds; the result flips after successThreshold
consecutive successes or failureThreshold consecutive failures. Readiness starts as
failure, liveness and startup as success/unknown; liveness and readiness do not run until
the startup probe has succeeded. Checks dial the process on 127.0.0.1; messages name the
pod IP as a real kubelet's would (bookkeeping only, never dialled). Exec probes cannot
run in a simulated container and count as successes.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import httpx
from kubernetes.client import V1Container, V1HTTPGetAction, V1Probe

_TIMEOUT = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"


class ProbeKind(Enum):
    STARTUP = "Startup"
    READINESS = "Readiness"
    LIVENESS = "Liveness"


@dataclass(frozen=True)
class ProbeTarget:
    """Where one probe checks: the local port to dial and the pod address it reports."""

    local_port: int
    pod_ip: str
    port: int


@dataclass
class ProbeWorker:
    """Runs one probe in a daemon thread; ``result`` is read by the pod worker."""

    kind: ProbeKind
    probe: V1Probe
    target: ProbeTarget
    on_failure: Callable[[str], None]  # an Unhealthy event with the check's output
    on_change: Callable[[], None]  # wakes the pod worker
    gate: threading.Event | None = None  # set once the container counts as started
    result: bool | None = None  # None: unknown (a startup probe not yet decided)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        initial = {ProbeKind.STARTUP: None, ProbeKind.READINESS: False, ProbeKind.LIVENESS: True}
        self.result = initial[self.kind]

    def start(self) -> ProbeWorker:
        name = f"probe-{self.kind.value.lower()}-{self.target.local_port}"
        threading.Thread(target=self._run, name=name, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        p = self.probe
        successes = failures = 0
        if self._stop.wait(p.initial_delay_seconds or 0):
            return
        while not self._stop.is_set():
            if self.gate is None or self.gate.is_set():
                ok, output = self._check()
                successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
                if not ok:
                    self.on_failure(f"{self.kind.value} probe failed: {output}")
                self._update(successes, failures)
                if self.kind is ProbeKind.STARTUP and self.result:
                    return  # a startup probe stops once it has succeeded
            self._stop.wait(p.period_seconds or 10)

    def _update(self, successes: int, failures: int) -> None:
        p = self.probe
        new = self.result
        if successes >= (p.success_threshold or 1):
            new = True
        elif failures >= (p.failure_threshold or 3):
            new = False
        if new != self.result:
            self.result = new
            self.on_change()

    @property
    def failed(self) -> bool:
        """A startup or liveness probe reached its failure threshold: restart."""
        return self.kind is not ProbeKind.READINESS and self.result is False

    def _check(self) -> tuple[bool, str]:
        timeout = float(self.probe.timeout_seconds or 1)
        if self.probe.http_get is not None:
            return http_check(self.probe.http_get, self.target, timeout)
        if self.probe.tcp_socket is not None:
            return tcp_check(self.target, timeout)
        return True, ""


def container_port(container: V1Container, port: int | str) -> int:
    """An action's port: a number, or the name of one of the container's ports (0 if none)."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    named = {p.name: p.container_port for p in container.ports or [] if p.name}
    return int(named.get(port, 0))


def http_check(get: V1HTTPGetAction, target: ProbeTarget, timeout: float) -> tuple[bool, str]:
    scheme = (get.scheme or "HTTP").lower()
    path = get.path or "/"
    shown = f"{scheme}://{target.pod_ip}:{target.port}{path}"
    headers = {"User-Agent": "kube-probe/1.20"} | {h.name: h.value for h in get.http_headers or []}
    try:
        response = httpx.get(
            f"{scheme}://127.0.0.1:{target.local_port}{path}",
            headers=headers,
            timeout=timeout,
            verify=False,
            follow_redirects=True,
        )
    except httpx.TimeoutException:
        return False, f'Get "{shown}": {_TIMEOUT}'
    except httpx.TransportError:
        return False, f'Get "{shown}": {_refused(target)}'
    if 200 <= response.status_code < 400:
        return True, ""
    return False, f"HTTP probe failed with statuscode: {response.status_code}"


def tcp_check(target: ProbeTarget, timeout: float) -> tuple[bool, str]:
    try:
        with socket.create_connection(("127.0.0.1", target.local_port), timeout=timeout):
            return True, ""
    except OSError:
        return False, _refused(target)


def _refused(target: ProbeTarget) -> str:
    return f"dial tcp {target.pod_ip}:{target.port}: connect: connection refused"
