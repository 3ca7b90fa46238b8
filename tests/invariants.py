"""The Service invariants of docs (../shared/DESIGN.md "Invariants"), watched through a test.

A `ServiceMonitor` reads one Service's EndpointSlices (what kube-proxy and other data
planes route by; its Endpoints where the API serves no slices) every 100 ms on a daemon
thread, maps each ready address's pod to its ReplicaSet and that to its Deployment, and
keeps a sample per read: when, which Deployments have ready addresses, how many. At
`stop()` (or the end of its `with` block) it checks:

- I1: outside a declared window, the Service never has no ready address while it had one
  at the start. Windows: `allow_empty()` around a block, `allow_empty_during()` for windows
  known afterwards, `honour_declared_outages=True` for the outages an in-place handoff
  declares in the Service's ledger (from the old pods' stop, for at most the declared
  bound), or `allow_outage(reason)` for a test that takes the Service down on purpose.
- I2: ready addresses of two Deployments are listed together only for a swap instant
  (`swap_grace_s`, see SWAP_GRACE_S), unless `allow_mixed(reason)`.
- I3: at the end it routes to at least one ready pod whenever it did at the start.

A violation raises AssertionError with the timeline around the offending samples. A read
that fails (the API server down in a fault test, say) is recorded and shown, never a
violation: the data plane keeps its last routes meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Self

from flows.kube import read, slices
from flows.kube.client import Kube
from flows.ledger import OutageRecord, parse_ledger

# How long ready addresses of two Deployments may be listed together at one transition.
# Measured on the sandbox (kube-controller-manager 1.20, its EndpointSlice controller):
# a selector swap rewrites the Service's one controller-managed slice in a single update,
# so at 100 ms sampling a normal side-by-side swap shows no sample with two Deployments
# (tests/test_invariants.py::test_a_selector_swap_is_one_instant measures it; see its
# report). The grace covers the controller's batching (endpoint-updates-batch-period, 0
# by default) and a slice split over two objects updated one after the other on a loaded
# 2-core machine; a handoff that keeps both behind the Service for longer is not swapping.
SWAP_GRACE_S = 2.0
INTERVAL_S = 0.1
READ_TIMEOUT_S = 2.0
# How often the Service itself is read (selector, ledger), in samples.
SERVICE_EVERY = 5
NO_DEPLOYMENT = "(no Deployment)"


@dataclass(frozen=True)
class Sample:
    """One read of the Service's routes. `error` set: the read failed, nothing is known."""

    at: float  # time.monotonic() as the read was sent
    workloads: frozenset[str] = frozenset()
    ready: int = 0
    pods: tuple[str, ...] = ()
    selector: str | None = None  # as last read (every SERVICE_EVERY samples)
    error: str | None = None
    # When the routes' read returned: what it shows held at some moment in [at, until]
    # (a read answered late on a loaded machine can show a state newer than `at`).
    until: float | None = None

    @property
    def seen_until(self) -> float:
        return self.at if self.until is None else self.until

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Violation:
    invariant: str
    what: str
    start: float
    end: float


@dataclass
class ServiceMonitor:
    """Watches Service `namespace/service` on a thread from `start()` (or `with`) to
    `stop()`; `check()` (called on a clean exit of the `with` block) raises on a
    violation."""

    kube: Kube
    namespace: str
    service: str
    interval_s: float = INTERVAL_S
    swap_grace_s: float = SWAP_GRACE_S
    honour_declared_outages: bool = False
    # How long start() waits for a first ready address (the Deployments may be Ready a
    # moment before the EndpointSlice controller lists their pods).
    start_wait_s: float = 15.0
    samples: list[Sample] = field(default_factory=list)
    outages: list[OutageRecord] = field(default_factory=list)
    had_ready_at_start: bool = False
    _windows: list[tuple[float, float, str]] = field(default_factory=list)
    _allowed: dict[str, str] = field(default_factory=dict)  # invariant -> reason
    _pod_owner: dict[str, str | None] = field(default_factory=dict)  # pod -> ReplicaSet
    _rs_owner: dict[str, str | None] = field(default_factory=dict)  # ReplicaSet -> Deployment
    _version: str | None = None
    _selector: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _started: float = 0.0
    _wall_offset: float = 0.0  # time.time() - time.monotonic()
    _final: Sample | None = None

    # -- declarations -------------------------------------------------------------------

    @contextmanager
    def allow_empty(self, reason: str = "declared by the test") -> Iterator[None]:
        """The Service may have no ready address inside this block (I1)."""
        start = time.monotonic()
        try:
            yield
        finally:
            self._windows.append((start, time.monotonic(), reason))

    def allow_empty_during(self, windows: Iterable[tuple[float, float]], reason: str) -> None:
        """Windows of time.monotonic() seconds in which the Service may have no ready address."""
        self._windows.extend((start, end, reason) for start, end in windows)

    def allow(self, *invariants: str, reason: str) -> None:
        """The test breaks these invariants ("I1", "I2", "I3") on purpose: not checked."""
        assert reason and set(invariants) <= {"I1", "I2", "I3"}, (invariants, reason)
        self._allowed.update(dict.fromkeys(invariants, reason))

    def allow_outage(self, reason: str) -> None:
        """The test takes the Service down on purpose: I1 and I3 are not checked."""
        self.allow("I1", "I3", reason=reason)

    def allow_mixed(self, reason: str) -> None:
        """The test routes the Service to two workloads on purpose: I2 is not checked."""
        self.allow("I2", reason=reason)

    def wait_ready(self, timeout_s: float = 15.0) -> bool:
        """Until the latest good sample lists a ready address (or timeout_s): whether it did.
        For closing an allow_empty() window once the routes have caught up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            good = [s for s in self.samples[-20:] if s.ok]
            if good and good[-1].ready:
                return True
            time.sleep(self.interval_s)
        return False

    # -- running ------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.stop()
        if kind is None:
            self.check()

    def start(self) -> Self:
        """Take the first sample (waiting a little for a ready address), then watch."""
        self._started = time.monotonic()
        self._wall_offset = time.time() - self._started
        self._version = slices.served_version(self.kube)
        deadline = self._started + self.start_wait_s
        while True:
            first = self._sample(0)
            if (first.ok and first.ready) or time.monotonic() > deadline:
                break
            time.sleep(self.interval_s)
        self.had_ready_at_start = first.ok and first.ready > 0
        self._thread = threading.Thread(
            target=self._loop, daemon=True, name=f"invariants-{self.service}"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching; one last read for I3 (a few tries when the API fails)."""
        if self._thread is None or self._final is not None:
            return
        self._stop.set()
        self._thread.join(timeout=30)
        for _ in range(10):
            self._final = self._sample(SERVICE_EVERY)
            if self._final.ok:
                break
            time.sleep(0.5)

    def close(self) -> None:
        """stop(), for contextlib.closing: stops without checking."""
        self.stop()

    def _loop(self) -> None:
        tick = 1
        while not self._stop.wait(self.interval_s):
            self._sample(tick)
            tick += 1

    def _sample(self, tick: int) -> Sample:
        now = time.monotonic()
        try:
            if tick % SERVICE_EVERY == 0:
                self._read_service()
            pods = self._ready_pods()
            answered = time.monotonic()
            owners = self._deployments(pods)
            sample = Sample(
                at=now,
                workloads=frozenset(owners.values()),
                ready=len(pods),
                pods=tuple(sorted(pods)),
                selector=self._selector,
                until=answered,
            )
        except Exception as exc:  # recorded, never a violation: the monitor keeps going
            sample = Sample(at=now, selector=self._selector, error=_short(exc))
        self.samples.append(sample)
        return sample

    def _read_service(self) -> None:
        service = read.service_snapshot(
            _plain(
                self.kube,
                self.kube.core.read_namespaced_service(
                    self.service, self.namespace, _request_timeout=READ_TIMEOUT_S
                ),
            )
        )
        selector = sorted(service.selector.items())
        self._selector = ",".join(f"{k}={v}" for k, v in selector) or "(none)"
        ledger = parse_ledger(service.annotations)
        if ledger is not None and ledger.outage and ledger.outage not in self.outages:
            self.outages.append(ledger.outage)

    def _ready_pods(self) -> set[str]:
        if self._version is None:
            raw = self.kube.core.read_namespaced_endpoints(
                self.service, self.namespace, _request_timeout=READ_TIMEOUT_S
            )
            return set(read.endpoints_snapshot(_plain(self.kube, raw)).ready_pods)
        listed = slices.list_function(self.kube, self._version)(
            self.namespace,
            label_selector=f"{slices.SERVICE_NAME_LABEL}={self.service}",
            _request_timeout=READ_TIMEOUT_S,
        )
        items = _plain(self.kube, listed).get("items") or []
        return {pod for item in items for pod in slices.slice_snapshot(item).ready_pods}

    def _deployments(self, pods: set[str]) -> dict[str, str]:
        """Each pod's Deployment: pod -> ReplicaSet -> Deployment, both cached (a pod's
        owner never changes; its ReplicaSet's controller neither)."""
        if pods - self._pod_owner.keys():
            pods_listed = self.kube.core.list_namespaced_pod(
                self.namespace, _request_timeout=READ_TIMEOUT_S
            )
            for item in _plain(self.kube, pods_listed).get("items") or []:
                snapshot = read.pod_snapshot(item)
                self._pod_owner[snapshot.name] = snapshot.owner
        owned = {self._pod_owner.get(p) for p in pods} - {None}
        if owned - self._rs_owner.keys():
            sets_listed = self.kube.apps.list_namespaced_replica_set(
                self.namespace, _request_timeout=READ_TIMEOUT_S
            )
            for item in _plain(self.kube, sets_listed).get("items") or []:
                replica_set = read.replica_set_snapshot(item)
                self._rs_owner[replica_set.name] = replica_set.owner
        found: dict[str, str] = {}
        for pod in pods:
            if pod not in self._pod_owner:  # gone before we could read it: by its name
                found[pod] = pod.rsplit("-", 2)[0]
                continue
            rs = self._pod_owner[pod]
            found[pod] = (self._rs_owner.get(rs) if rs else None) or NO_DEPLOYMENT
        return found

    # -- checking -----------------------------------------------------------------------

    def violations(self) -> list[Violation]:
        found: list[Violation] = []
        if self.had_ready_at_start and "I1" not in self._allowed:
            found += self._empty_outside_windows()
        if "I2" not in self._allowed:
            found += self._mixed_too_long()
        final = self._final
        if (
            self.had_ready_at_start
            and "I3" not in self._allowed
            and final is not None
            and final.ok
            and final.ready == 0
        ):
            found.append(Violation("I3", "no ready address at the end", final.at - 1.0, final.at))
        return found

    def check(self) -> None:
        """AssertionError with a timeline when an invariant was broken."""
        found = self.violations()
        if found:
            raise AssertionError(self.report(found))

    def _windows_now(self) -> list[tuple[float, float, str]]:
        windows = list(self._windows)
        if self.honour_declared_outages:
            windows += [
                (
                    o.started - self._wall_offset,
                    o.started - self._wall_offset + o.bound_s,
                    f"in-place outage declared in the ledger (bound {o.bound_s:.0f} s)",
                )
                for o in self.outages
            ]
        return windows

    def _empty_outside_windows(self) -> list[Violation]:
        windows = self._windows_now()
        bad = [
            s
            for s in self.samples
            if s.ok
            and s.ready == 0
            and not any(a <= s.seen_until and s.at <= b for a, b, _ in windows)
        ]
        return [
            Violation("I1", "no ready address, outside any declared window", a, b)
            for a, b in _stretches(self.samples, {id(s) for s in bad})
        ]

    def _mixed_too_long(self) -> list[Violation]:
        """Stretches of samples listing two or more Deployments (failed reads do not end a
        stretch), longer than the grace: from the first such sample to the first after
        that lists fewer."""
        found = []
        mixed = {id(s) for s in self.samples if s.ok and len(s.workloads) > 1}
        for start, end in _stretches(self.samples, mixed):
            if end - start > self.swap_grace_s:
                found.append(
                    Violation(
                        "I2",
                        f"ready addresses of two Deployments listed together for "
                        f"{end - start:.1f} s (grace {self.swap_grace_s:.1f} s)",
                        start,
                        end,
                    )
                )
        return found

    def report(self, found: list[Violation]) -> str:
        lines = [f"Service {self.namespace}/{self.service} broke its invariants:"]
        for v in found:
            lines.append(f"  {v.invariant} at {self._rel(v.start)}..{self._rel(v.end)}: {v.what}")
        windows = self._windows_now()
        if windows:
            lines.append(
                "  windows allowed empty: "
                + "; ".join(f"{self._rel(a)}..{self._rel(b)} ({why})" for a, b, why in windows)
            )
        errors = [s for s in self.samples if not s.ok]
        if errors:
            lines.append(f"  {len(errors)} of {len(self.samples)} reads failed (not violations)")
        lines.append("  timeline (a line per change; t from the monitor's start):")
        lines += self.timeline([(v.start - 2.0, v.end + 2.0) for v in found])
        return "\n".join(lines)

    def timeline(self, around: list[tuple[float, float]] | None = None) -> list[str]:
        """A line per change of what the Service routes to, within `around` if given."""
        shown = self.samples
        if around:
            shown = [s for s in shown if any(a <= s.at <= b for a, b in around)]
        lines, last = [], None
        for s in shown:
            key = (s.workloads, s.ready, s.selector, s.error)
            if key == last:
                continue
            last = key
            if s.error:
                what = f"read failed: {s.error}"
            else:
                names = ", ".join(sorted(s.workloads)) or "-"
                what = f"{s.ready} ready  {names}  pods={list(s.pods)}"
            lines.append(f"    {self._rel(s.at):>9}  {what}  selector={s.selector}")
        return lines

    def summary(self) -> dict[str, Any]:
        """Figures for a report: samples, failed reads, longest two-Deployment stretch."""
        mixed = {id(s) for s in self.samples if s.ok and len(s.workloads) > 1}
        spans = [b - a for a, b in _stretches(self.samples, mixed)]
        return {
            "samples": len(self.samples),
            "failed_reads": sum(1 for s in self.samples if not s.ok),
            "mixed_stretches_s": [round(x, 2) for x in spans],
            "empty_samples": sum(1 for s in self.samples if s.ok and s.ready == 0),
        }

    def _rel(self, at: float) -> str:
        return f"+{at - self._started:.1f} s"


def _stretches(samples: list[Sample], marked: set[int]) -> list[tuple[float, float]]:
    """Maximal runs of marked samples (failed reads inside a run continue it), each from
    its first marked sample to the first later good sample that is not marked (or its
    last marked sample, at the end)."""
    found: list[tuple[float, float]] = []
    start: float | None = None
    last = 0.0
    for s in samples:
        if id(s) in marked:
            start = s.at if start is None else start
            last = s.at
        elif s.ok and start is not None:
            found.append((start, s.at))
            start = None
    if start is not None:
        found.append((start, last))
    return found


def _plain(kube: Kube, obj: Any) -> dict[str, Any]:
    raw: dict[str, Any] = kube.api.sanitize_for_serialization(obj)
    return raw


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= 160 else text[:157] + "..."
