"""What every pod worker on this kubelet shares: API, cluster description, runtime parts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from sandbox.cluster import ClusterConfig
from sandbox.kubelet.events import EventRecorder
from sandbox.kubelet.images import ImageStore
from sandbox.kubelet.ipam import IpPool
from sandbox.kubelet.runtime import PodTable
from sandbox.kubelet.spawner import Spawner


@dataclass(frozen=True)
class NodeContext:
    api: client.ApiClient
    cluster: ClusterConfig
    images: ImageStore
    spawner: Spawner
    events: EventRecorder
    table: PodTable
    ips: IpPool
    pods_dir: Path  # per-pod directories with container logs
