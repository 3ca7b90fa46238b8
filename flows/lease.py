"""One handoff per Service at a time: a coordination.k8s.io Lease in the namespace.

The holder renews it from a background thread; a run that dies stops renewing and
the Lease expires after LEASE_S, so a rerun can take over. A second handoff for the
same Service while the Lease is live is refused at once.

Renewal rides out an API server that is down or failing (5xx, timeouts), retrying
with backoff until the Lease would expire by this run's own clock. From then on
another run may hold it, so it is lost for good; it is lost as well when a renewal
finds another holder or another leaseTransitions count. `check()` raises LeaseLost
once it is lost; the run's writes pass through it (the fence), so the run stops
writing. While it holds, `check()` gives the deadline of each write: when the Lease
would expire by this run's clock, from its last renewal, less SAFETY; a write that is
retried stops there (flows/kube/client.py, RetryingApiClient).

A Lease of another holder is expired, as client-go's leader election has it, when this
run has seen no change of its holder, renewTime or leaseTransitions for its
leaseDurationSeconds, measured on this run's own monotonic clock from when it observed
the last change. The holder's renewTime is its wall clock, never compared with this
machine's: clocks of two machines may be minutes apart. So a run that finds a Lease of
another holder watches it: a renewal seen is a live run (refused, or waited for while it
is the run being resumed), no change for leaseDurationSeconds is a dead one (taken).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from flows.errors import HandoffError, PermanentError, TransientError
from flows.kube.client import Conflict, Kube, NotFound
from flows.kube.leases import create_lease, delete_lease, read_lease, replace_lease
from flows.kube.objects import LeaseSnapshot
from retrypolicy.backoff import compute_delay, draw

LEASE_S = int(os.environ.get("HANDOFF_LEASE_S", "30"))
# Writing stops this share of LEASE_S early: a taker's clock and a renewal's round trip
# may each be off by a little.
SAFETY = 0.1


class HandoffInProgress(PermanentError):
    """Another handoff holds this Service's Lease."""


class LeaseLost(PermanentError):
    """This run no longer holds the Service's Lease; it must not write again."""


@dataclass(frozen=True)
class _Observed:
    """A Lease of another holder as this run last saw it change."""

    record: tuple[object, ...]  # what a renewal or a takeover changes
    at: float  # time.monotonic() when this run first saw the record


def _record(lease: LeaseSnapshot) -> tuple[object, ...]:
    spec = lease.body.get("spec") or {}
    return (
        spec.get("holderIdentity"),
        spec.get("renewTime"),
        spec.get("acquireTime"),
        spec.get("leaseDurationSeconds"),
        spec.get("leaseTransitions"),
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _poll_s(duration_s: float) -> float:
    """How often a would-be taker reads another holder's Lease (client-go: RetryPeriod)."""
    return max(0.2, min(1.0, duration_s / 10))


def lease_name(service: str) -> str:
    return f"handoff-{service}"


def read_holder(kube: Kube, namespace: str, service: str) -> str | None:
    """The holder of the Service's Lease; None when there is no Lease. A refusal or an
    outage raises: it says nothing about whether another run holds the Service."""
    try:
        lease = read_lease(kube, namespace, lease_name(service))
    except NotFound:
        return None
    return lease.holder or None


class ServiceLease:
    """`with ServiceLease(kube, ns, svc, holder):` holds the Lease for the block."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        service: str,
        holder: str,
        *,
        wait_for: str | None = None,
    ) -> None:
        """wait_for: the holder of an unfinished run of this handoff (from the ledger);
        its Lease is waited out (it expires if that run died) instead of refused."""
        self.kube, self.namespace, self.name = kube, namespace, lease_name(service)
        self.holder, self.wait_for = holder, wait_for
        self.lost: str | None = None
        self._waited_since: float | None = None  # watching the run being resumed since
        self._valid_until = 0.0  # time.monotonic() until which the Lease is surely ours
        self._transitions = 0
        self._last_error = ""  # of the renewals failing since the last that went through
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, daemon=True, name=self.name)

    def __enter__(self) -> ServiceLease:
        self.acquire()
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if exc[0] is None:
            self.release()
            return
        # Do not hide the run's own error: an unreleased Lease expires by itself.
        with contextlib.suppress(HandoffError):
            self.release()

    def check(self) -> float:
        """Raise LeaseLost unless this run still holds the Lease (the fence of its writes);
        else the time.monotonic() by which a write must be done: the Lease's remaining
        time from its last renewal on this run's clock, less SAFETY of LEASE_S."""
        if self.lost is None and time.monotonic() >= self._valid_until:
            failing = f": {self._last_error}" if self._last_error else ""
            self._lose(f"not renewed for {LEASE_S * (1 - SAFETY):.1f} s{failing}")
        if self.lost is not None:
            raise LeaseLost(self.lost)
        return self._valid_until

    def _lose(self, why: str) -> None:
        if self.lost is None:
            self.lost = (
                f"handoff {self.holder} lost Lease {self.namespace}/{self.name}: {why}; it "
                "stopped writing. Another run may hold the Service now: see its "
                "handoff.dev/ledger annotation, and run `handoff run` again to resume (or "
                "`handoff rollback`) once no other run holds the Lease"
            )

    def _held(self, since: float, transitions: int) -> None:
        self._valid_until = since + LEASE_S * (1 - SAFETY)
        self._transitions = transitions

    def _spec(self) -> dict[str, object]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": LEASE_S,
            "renewTime": _micro(_now()),
            "acquireTime": _micro(_now()),
        }

    def acquire(self) -> None:
        """Create the Lease, or take it: at once when it has no holder or is this run's;
        when another holder's, once it has expired by this run's clock (see the module's
        docstring). A renewal seen refuses (HandoffInProgress), unless the holder is the
        run being resumed (wait_for): that one is waited out for its duration and 5 s."""
        observed: _Observed | None = None
        while True:
            started = time.monotonic()
            body: dict[str, Any] = {
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {**self._spec(), "leaseTransitions": 0},
            }
            try:
                create_lease(self.kube, self.namespace, body)
                self._held(started, 0)
                return
            except Conflict:
                pass
            try:
                lease = read_lease(self.kube, self.namespace, self.name)
            except NotFound:  # released between the create and the read
                continue
            seen = time.monotonic()
            record = _record(lease)
            duration = lease.duration_s or LEASE_S
            if not lease.holder or lease.holder == self.holder:
                expired = True
            else:
                if observed is not None and observed.record != record:
                    self._renewed(lease, observed, seen)
                if observed is None or observed.record != record:
                    observed = _Observed(record, seen)
                expired = seen - observed.at >= duration
            if expired:
                try:
                    self._take(lease, body, started)
                    return
                except Conflict:  # written since the read: look again
                    continue
            assert observed is not None
            time.sleep(max(0.0, min(_poll_s(duration), observed.at + duration - seen)))

    def _renewed(self, lease: LeaseSnapshot, observed: _Observed, seen: float) -> None:
        """Another holder's Lease changed since this run last saw it: that run is alive.
        Refused at once; the run being resumed is waited for, up to its duration and 5 s."""
        service = self.name.removeprefix("handoff-")
        duration = lease.duration_s or LEASE_S
        if lease.holder != self.wait_for:
            raise HandoffInProgress(
                f"Service {self.namespace}/{service} is being handed off by {lease.holder}: "
                f"its Lease {self.name} was renewed {seen - observed.at:.0f} s after this "
                "run first saw it; wait for that run to finish, or for its Lease to expire "
                f"({duration} s without renewal) if it died"
            )
        if self._waited_since is None:
            self._waited_since = observed.at
        if seen - self._waited_since > duration + 5:
            raise HandoffInProgress(
                f"Service {self.namespace}/{service} is being handed off by "
                f"{self.wait_for}: its Lease {self.name} was still renewed after "
                f"{duration + 5} s, so that run is alive; let it finish"
            )

    def _take(self, lease: LeaseSnapshot, body: dict[str, Any], started: float) -> None:
        """Replace the Lease as read (its resourceVersion: a 409 if it changed since)."""
        # Every change of holder counts, so a run that lost the Lease can tell.
        transitions = lease.transitions + (lease.holder != self.holder)
        body["spec"]["leaseTransitions"] = transitions
        body["metadata"]["resourceVersion"] = lease.resource_version
        replace_lease(self.kube, self.namespace, body, action="take over")
        self._held(started, transitions)

    def _renew_loop(self) -> None:
        """Renew every LEASE_S/3; on a transient error retry sooner, with backoff, until
        the Lease would expire; then (or on a refusal, or another holder) it is lost."""
        interval, attempt, delay = LEASE_S / 3, 0, LEASE_S / 3
        last_error = ""
        while not self._stop.wait(delay):
            started = time.monotonic()
            if started >= self._valid_until:
                self._lose(f"not renewed for {LEASE_S * (1 - SAFETY):.1f} s ({last_error})")
            if self.lost is not None:
                return
            try:
                self._renew()
                self._held(started, self._transitions)
                attempt, delay = 0, interval
                self._last_error = ""
            except TransientError as exc:
                last_error = self._last_error = str(exc)
                left = max(0.0, self._valid_until - time.monotonic())
                delay = min(compute_delay(attempt, first_s=0.2, cap_s=interval, u=draw()), left)
                attempt += 1
            except PermanentError as exc:
                self._lose(f"renewal refused: {exc}")
                return

    def _renew(self) -> None:
        """Read the Lease; if it is still this run's (holder and transitions), write a new
        renewTime under its resourceVersion (a 409 means someone else wrote it)."""
        timeout = LEASE_S / 3
        lease = read_lease(self.kube, self.namespace, self.name, timeout_s=timeout)
        holder, transitions = lease.holder, lease.transitions
        if holder != self.holder or transitions != self._transitions:
            self._lose(
                f"it is held by {holder} now (leaseTransitions {transitions}, "
                f"this run took it at {self._transitions})"
            )
            raise LeaseLost(self.lost or "")
        body = {**lease.body, "spec": {**lease.body["spec"], "renewTime": _micro(_now())}}
        replace_lease(self.kube, self.namespace, body, action="renew", timeout_s=timeout)

    def release(self) -> None:
        """Delete the Lease if this run still holds it (a takeover keeps it)."""
        try:
            lease = read_lease(self.kube, self.namespace, self.name)
            if lease.holder != self.holder:
                return
            delete_lease(
                self.kube, self.namespace, self.name, resource_version=lease.resource_version
            )
        except (NotFound, Conflict):
            pass
