"""What the Service routes to while a cell runs, sampled from its Endpoints.

A thread reads the Service's Endpoints a few times a second and keeps, per sample, which
workloads its ready addresses belong to; a cell then asserts that every sample that
could be read named exactly one ready workload. A read that fails (the API server is
down, the Service was deleted) is no sample: the proxy keeps its last routes meanwhile.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from flows.kube.client import Kube


def workload_of(pod: str) -> str:
    """A Deployment's pod is named DEPLOYMENT-REPLICASETHASH-SUFFIX."""
    return pod.rsplit("-", 2)[0]


@dataclass
class RouteWatch:
    kube: Kube
    namespace: str
    service: str
    interval_s: float = 0.25
    samples: list[tuple[float, frozenset[str]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> RouteWatch:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="route-watch")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                endpoints = self.kube.core.read_namespaced_endpoints(
                    self.service, self.namespace, _request_timeout=2
                )
            except (ApiException, HTTPError, OSError):
                continue
            ready = {
                workload_of(a.target_ref.name)
                for s in endpoints.subsets or []
                for a in s.addresses or []
                if a.target_ref is not None
            }
            self.samples.append((time.monotonic(), frozenset(ready)))

    def not_one_workload(self) -> list[tuple[float, frozenset[str]]]:
        """Samples whose ready addresses were not those of exactly one workload."""
        return [s for s in self.samples if len(s[1]) != 1]
