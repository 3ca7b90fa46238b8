"""What runs where: the kubelet's table of pods and their container processes.

The pod workers write it; the kubelet's HTTPS server (logs, port-forward) reads it, and
every change is mirrored to ``run_dir/pod-ports.json`` (``{podIP: {containerPort:
localPort}}``) so the service proxy, another process, can turn an endpoint address into
the 127.0.0.1 port of the process behind it. Pod IPs are bookkeeping only: never dialled.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ContainerRuntime:
    """One container of a running pod as the host sees it."""

    log_path: Path  # the current (or last) run's stdout+stderr
    previous_log_path: Path | None  # the run before, for `kubectl logs --previous`
    ports: Mapping[int, int] = field(default_factory=dict)  # containerPort -> 127.0.0.1 port
    running: bool = False


@dataclass(frozen=True)
class RunningPod:
    """A pod this kubelet runs: its identity, its bookkeeping IP, its containers."""

    uid: str
    pod_ip: str
    node: str
    containers: Mapping[str, ContainerRuntime] = field(default_factory=dict)


class PodTable:
    """Thread-safe (namespace, pod name) -> RunningPod, mirrored to a ports file."""

    def __init__(self, ports_file: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], RunningPod] = {}
        self._ports_file = ports_file
        self._written: dict[str, dict[str, int]] | None = None

    def lookup(self, namespace: str, pod: str) -> RunningPod | None:
        with self._lock:
            return self._pods.get((namespace, pod))

    def local_port(self, namespace: str, pod: str, port: int) -> int | None:
        """The 127.0.0.1 port behind containerPort ``port`` of a running container."""
        found = self.lookup(namespace, pod)
        if found is None:
            return None
        for container in found.containers.values():
            if container.running and port in container.ports:
                return container.ports[port]
        return None

    def put(self, namespace: str, pod: str, entry: RunningPod) -> None:
        with self._lock:
            self._pods[(namespace, pod)] = entry
            self._sync_ports_file()

    def remove(self, namespace: str, pod: str, uid: str) -> None:
        """Forget the pod if the entry is still that uid's (a successor may hold the name)."""
        with self._lock:
            current = self._pods.get((namespace, pod))
            if current is not None and current.uid == uid:
                del self._pods[(namespace, pod)]
                self._sync_ports_file()

    def snapshot(self) -> dict[tuple[str, str], RunningPod]:
        with self._lock:
            return dict(self._pods)

    def _sync_ports_file(self) -> None:
        """Rewrite the ports file atomically, only when its content changes."""
        if self._ports_file is None:
            return
        mapping = {
            entry.pod_ip: {
                str(port): local
                for container in entry.containers.values()
                for port, local in container.ports.items()
            }
            for entry in self._pods.values()
        }
        if mapping == self._written:
            return
        tmp = self._ports_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(mapping, indent=2, sort_keys=True))
        tmp.replace(self._ports_file)
        self._written = mapping
