"""What the Service routes to while a cell runs, sampled from its Endpoints; and, in
place, the outages the runs declared, read from its ledger.

A thread reads the Service's Endpoints a few times a second and keeps, per sample, which
workloads its ready addresses belong to; a cell then asserts that every sample that
could be read named exactly one ready workload (in place, none only inside a declared
outage). A read that fails (the API server is down, the Service was deleted) is no
sample: the proxy keeps its last routes meanwhile.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Self

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from flows.kube.client import Kube
from flows.ledger import OutageRecord, parse_ledger


def workload_of(pod: str) -> str:
    """A Deployment's pod is named DEPLOYMENT-REPLICASETHASH-SUFFIX."""
    return pod.rsplit("-", 2)[0]


@dataclass
class _Sampler:
    """Reads the Service's objects a few times a second on a thread, until the block ends;
    a read that fails is skipped."""

    kube: Kube
    namespace: str
    service: str
    interval_s: float = 0.25
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="fault-watch")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except (ApiException, HTTPError, OSError):
                continue

    def sample(self) -> None:
        raise NotImplementedError


@dataclass
class RouteWatch(_Sampler):
    samples: list[tuple[float, frozenset[str]]] = field(default_factory=list)

    def sample(self) -> None:
        endpoints = self.kube.core.read_namespaced_endpoints(
            self.service, self.namespace, _request_timeout=2
        )
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


@dataclass
class OutageWatch(_Sampler):
    """Each in-place outage a run recorded in the Service's ledger (when the old pods were
    told to stop, what was declared): a rerun that rolls back and one that hands off
    again each declare their own."""

    records: list[OutageRecord] = field(default_factory=list)

    def sample(self) -> None:
        service = self.kube.core.read_namespaced_service(
            self.service, self.namespace, _request_timeout=2
        )
        ledger = parse_ledger(service.metadata.annotations or {})
        if ledger is not None and ledger.outage and ledger.outage not in self.records:
            self.records.append(ledger.outage)
