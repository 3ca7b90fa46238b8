"""What the kubelet's HTTPS server reads from the pod table (`runtime.PodTable`).

Structural types only, so the server depends on the table's shape, not its module.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol


class ContainerView(Protocol):
    @property
    def log_path(self) -> Path: ...
    @property
    def previous_log_path(self) -> Path | None: ...
    @property
    def running(self) -> bool: ...
    @property
    def ports(self) -> Mapping[int, int]: ...


class PodView(Protocol):
    @property
    def uid(self) -> str: ...
    @property
    def pod_ip(self) -> str: ...
    @property
    def containers(self) -> Mapping[str, ContainerView]: ...


class PodLookup(Protocol):
    """What the server reads from the kubelet's pod table (runtime.PodTable)."""

    def lookup(self, namespace: str, pod: str) -> PodView | None: ...
    def local_port(self, namespace: str, pod: str, port: int) -> int | None: ...
