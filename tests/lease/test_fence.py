"""Each fenced write is bounded by the Lease's remaining time, against a real
kube-apiserver behind a proxy that answers 503 to writes: a write retried while the
Lease is not renewed stops, LeaseLost, before the Lease could expire (never the 30 s
of the retry budget); every retry passes the fence again, so a Lease taken by another
run stops the retries at the next one; while the Lease is renewed, the write retries
for the policy's budget as any other request does."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from types import FrameType

import pytest
from prefect.exceptions import TerminationSignal

from flows import lease as lease_module
from flows.kube import write
from flows.kube.client import Kube, KubeUnavailable
from flows.lease import LeaseLost, ServiceLease, lease_name
from tests.kube.faultproxy import Fault, Faults
from tests.kube.test_retry import faulty
from tests.lease.test_lease import SERVICE, admin, ns, plane

__all__ = ["admin", "faulty", "ns", "plane"]  # the control plane fixtures, shared
pytestmark = pytest.mark.timeout(300)
LEASE_S = 6


@pytest.fixture(autouse=True)
def short_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lease_module, "LEASE_S", LEASE_S)
    monkeypatch.setenv("HANDOFF_RETRY_S", "60")  # far longer than the Lease


def _renewed(held: ServiceLease, kube: Kube, ns: str) -> None:
    """Return right after a renewal of the Lease (the write starts with its whole time)."""
    first = kube.coordination.read_namespaced_lease(lease_name(SERVICE), ns).spec.renew_time
    deadline = time.monotonic() + 3 * LEASE_S
    while time.monotonic() < deadline:
        now = kube.coordination.read_namespaced_lease(lease_name(SERVICE), ns).spec.renew_time
        if now != first:
            return
        time.sleep(0.1)
    raise AssertionError("the Lease was not renewed")


def test_a_fenced_write_stops_retrying_before_the_lease_expires(
    faulty: tuple[Kube, Faults], admin: Kube, ns: str
) -> None:
    kube, faults = faulty
    with ServiceLease(kube, ns, SERVICE, "run-a") as held:
        fenced = dataclasses.replace(kube, fence=held.check)
        _renewed(held, admin, ns)
        renewed = time.monotonic()
        # From now on every write answers 503: the Service's patch and the Lease's renewals.
        faults.rules += [Fault("PATCH", "", 503, -1), Fault("PUT", "", 503, -1)]
        with pytest.raises(LeaseLost, match=f"lost Lease {ns}/{lease_name(SERVICE)}"):
            write.patch_service(fenced, ns, SERVICE, resource_version=None, annotations={"a": "1"})
        stopped = time.monotonic()
        tries = len(faults.statuses("PATCH", f"/services/{SERVICE}"))
        time.sleep(1)
        assert len(faults.statuses("PATCH", f"/services/{SERVICE}")) == tries
        faults.rules.clear()
    assert tries >= 2, "the write was not retried at all"
    # A taker takes the Lease LEASE_S after it saw the last renewal; the write gave up
    # before then, by the holder's own clock.
    assert stopped - renewed <= LEASE_S, f"the write went on {stopped - renewed:.1f} s"
    annotations = admin.core.read_namespaced_service(SERVICE, ns).metadata.annotations or {}
    assert "a" not in annotations


def test_every_retry_of_a_fenced_write_passes_the_fence_again(
    faulty: tuple[Kube, Faults], admin: Kube, ns: str
) -> None:
    """Another run takes the Lease while the write is being retried (its renewals still go
    through): the retries stop at the next one, not at the end of the budget."""
    kube, faults = faulty
    with ServiceLease(kube, ns, SERVICE, "run-a") as held:
        fenced = dataclasses.replace(kube, fence=held.check)
        faults.rules.append(Fault("PATCH", f"/services/{SERVICE}", 503, -1))

        def take_over() -> None:
            time.sleep(1)
            lease = admin.coordination.read_namespaced_lease(lease_name(SERVICE), ns)
            lease.spec.holder_identity = "run-b"
            lease.spec.lease_transitions = (lease.spec.lease_transitions or 0) + 1
            admin.coordination.replace_namespaced_lease(lease_name(SERVICE), ns, lease)

        thief = threading.Thread(target=take_over)
        thief.start()
        started = time.monotonic()
        with pytest.raises(LeaseLost, match="held by run-b"):
            write.patch_service(fenced, ns, SERVICE, resource_version=None, annotations={"a": "1"})
        thief.join()
        assert time.monotonic() - started < LEASE_S + 1


def test_a_fenced_write_under_a_renewed_lease_retries_for_the_budget(
    faulty: tuple[Kube, Faults], ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the Service's writes fail, the Lease is renewed: the fence's deadline moves on
    with each renewal, and the write fails as an outage once the budget is spent."""
    kube, faults = faulty
    monkeypatch.setenv("HANDOFF_RETRY_S", str(LEASE_S + 4))
    with ServiceLease(kube, ns, SERVICE, "run-a") as held:
        fenced = dataclasses.replace(kube, fence=held.check)
        faults.rules.append(Fault("PATCH", f"/services/{SERVICE}", 503, -1))
        started = time.monotonic()
        with pytest.raises(KubeUnavailable):
            write.patch_service(fenced, ns, SERVICE, resource_version=None, annotations={"a": "1"})
        took = time.monotonic() - started
        held.check()
    assert LEASE_S + 4 - 6 <= took <= LEASE_S + 4 + 1, f"gave up after {took:.1f} s"


def _terminated(number: int, frame: FrameType | None) -> None:
    """What Prefect's SIGTERM handler does in a flow run: raise where the run is."""
    raise TerminationSignal(signal=number)


def test_a_cancellation_during_a_write_is_raised_once_the_write_is_answered(
    faulty: tuple[Kube, Faults], admin: Kube, ns: str
) -> None:
    """A SIGTERM that meets a write in flight: raised mid-request, the write would land
    after the rollback that follows had read the object (an in-place run cancelled as it
    scaled the old pods to 0 restored nothing, then the scale to 0 landed: no pods). It is
    raised once the answer is in, and the write is then on the cluster."""
    kube, faults = faulty
    with ServiceLease(kube, ns, SERVICE, "run-a") as held:
        fenced = dataclasses.replace(kube, fence=held.check)
        held_back = Fault("PATCH", f"/services/{SERVICE}", 0, 1, delay_s=3.0)
        faults.rules.append(held_back)
        previous = signal.signal(signal.SIGTERM, _terminated)

        def cancel_once_in_flight() -> None:  # the PATCH has reached the proxy, not the API
            if held_back.arrived.wait(30):
                os.kill(os.getpid(), signal.SIGTERM)

        canceller = threading.Thread(target=cancel_once_in_flight, daemon=True)
        try:
            canceller.start()
            with pytest.raises(TerminationSignal):
                write.patch_service(
                    fenced, ns, SERVICE, resource_version=None, annotations={"cancelled": "after"}
                )
            # What a rollback would read next.
            found = admin.core.read_namespaced_service(SERVICE, ns).metadata.annotations or {}
        finally:
            canceller.join(timeout=30)
            signal.signal(signal.SIGTERM, previous)
    assert held_back.arrived.is_set(), "the write never reached the proxy"
    assert found.get("cancelled") == "after", "the cancellation was raised before the answer"
