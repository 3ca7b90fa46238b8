"""Which pods a Service port leads to, computed as kube-proxy does (pure functions).

kube-proxy routes by EndpointSlices, not Endpoints: a Service port matches the slice
ports of the same name (both unnamed for a single-port Service); the endpoint port is
the resolved targetPort. Ready endpoints count (`ready` unset means ready), each by its
first address, every slice of the Service together, duplicates once; only when none is
ready do the endpoints that are terminating but still serving count instead (kube-proxy's
ProxyTerminatingEndpoints: `serving` unset means as `ready`, `terminating` unset means
not). Pod IPs are bookkeeping: `PodPorts` turns (pod IP, port) into the 127.0.0.1 port
the kubelet recorded in `pod-ports.json`, the only address ever dialled.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class ServicePort(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    port: int


class Backend(BaseModel):
    model_config = ConfigDict(frozen=True)

    ip: str
    port: int

    def __str__(self) -> str:
        return f"{self.ip}:{self.port}"


def service_ports(service: dict[str, Any]) -> list[ServicePort]:
    """The TCP ports a Service exposes; none for headless or ExternalName Services."""
    spec = service.get("spec") or {}
    if spec.get("type") == "ExternalName" or spec.get("clusterIP") in (None, "", "None"):
        return []
    return [
        ServicePort(name=p.get("name") or "", port=p["port"])
        for p in spec.get("ports") or []
        if (p.get("protocol") or "TCP") == "TCP"
    ]


def ready_backends(slices: list[dict[str, Any]], port_name: str) -> list[Backend]:
    """Ready (address, port) pairs of the slice ports named like the Service port."""
    return _backends(slices, port_name, _is_ready)


def routable_backends(slices: list[dict[str, Any]], port_name: str) -> list[Backend]:
    """Where kube-proxy sends new connections: the ready endpoints, or, only when there
    is none, the terminating endpoints that still serve."""
    return ready_backends(slices, port_name) or _backends(
        slices, port_name, _is_serving_terminating
    )


def _is_ready(conditions: dict[str, Any]) -> bool:
    return conditions.get("ready") is not False


def _is_serving_terminating(conditions: dict[str, Any]) -> bool:
    serving = conditions.get("serving")
    serving = _is_ready(conditions) if serving is None else serving
    return bool(serving) and conditions.get("terminating") is True


def _backends(
    slices: list[dict[str, Any]], port_name: str, wanted: Callable[[dict[str, Any]], bool]
) -> list[Backend]:
    backends: dict[Backend, None] = {}
    for endpoint_slice in slices:
        ports = [
            p["port"]
            for p in endpoint_slice.get("ports") or []
            if (p.get("name") or "") == port_name
            and (p.get("protocol") or "TCP") == "TCP"
            and p.get("port") is not None
        ]
        for endpoint in endpoint_slice.get("endpoints") or []:
            addresses = endpoint.get("addresses") or []
            if not addresses or not wanted(endpoint.get("conditions") or {}):
                continue
            backends.update((Backend(ip=addresses[0], port=port), None) for port in ports)
    return list(backends)


class PodPorts:
    """The kubelet's `pod-ports.json`, re-read whenever the file changes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stamp: tuple[int, int] | None = None
        self._table: dict[str, dict[str, int]] = {}

    def local_port(self, backend: Backend) -> int | None:
        self._refresh()
        return self._table.get(backend.ip, {}).get(str(backend.port))

    def _refresh(self) -> None:
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:
            self._stamp, self._table = None, {}
            return
        stamp = (stat.st_mtime_ns, stat.st_ino)  # atomic replace: a new inode each time
        if stamp != self._stamp:
            try:
                self._table = json.loads(self._path.read_text())
            except (OSError, ValueError):
                return  # keep the last good table; the next connection retries
            self._stamp = stamp
