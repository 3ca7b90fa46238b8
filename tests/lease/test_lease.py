"""The Service's Lease against a real kube-apiserver that is killed and started again:
renewal rides out an outage shorter than the Lease; an outage longer than the Lease
loses it, and from then on the run's writes are refused (fenced) even after the API
server is back and another run has taken the Lease. Reading the holder tells "no
Lease" from "cannot tell" (refused, or no API server)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from flows import lease as lease_module
from flows.kube import write
from flows.kube.client import Forbidden, Kube, KubeUnavailable, connect
from flows.lease import HandoffInProgress, LeaseLost, ServiceLease, lease_name, read_holder
from sandbox import controlplane
from tests.world import wait_until

pytestmark = pytest.mark.timeout(420)  # a control plane of its own, killed and restarted
SERVICE = "clients"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.ControlPlane]:
    """A control plane of this module's own: killing its API server disturbs no other test."""
    started = controlplane.start(tmp_path_factory.mktemp("cp"))
    yield started
    controlplane.stop(started)


@pytest.fixture
def admin(plane: controlplane.ControlPlane) -> Iterator[Kube]:
    kube = connect(plane.kubeconfig)
    yield kube
    kube.close()


@pytest.fixture
def ns(admin: Kube) -> str:
    """A fresh namespace holding the Service handed off."""
    namespace = f"lease-{uuid.uuid4().hex[:6]}"
    admin.core.create_namespace({"metadata": {"name": namespace}})
    admin.core.create_namespaced_service(
        namespace, {"metadata": {"name": SERVICE}, "spec": {"ports": [{"port": 80}]}}
    )
    return namespace


def _renewed_at(kube: Kube, ns: str) -> dt.datetime:
    lease = kube.coordination.read_namespaced_lease(lease_name(SERVICE), ns)
    return lease.spec.renew_time  # type: ignore[no-any-return]


def test_renewal_rides_out_an_outage_shorter_than_the_lease(
    plane: controlplane.ControlPlane, admin: Kube, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_module, "LEASE_S", 60)
    with ServiceLease(admin, ns, SERVICE, "run-a") as held:
        # From just after a renewal, for longer than one renewal interval (LEASE_S/3), so a
        # renewal fails in it; the retries that follow must reach the restarted API server
        # well inside the Lease, however long a loaded machine takes to restart it.
        first = _renewed_at(admin, ns)
        wait_until(
            lambda: _renewed_at(admin, ns) != first,
            timeout_s=30,
            what="a renewal of the Lease",
            every_s=0.2,
        )
        with controlplane.apiserver_outage(plane):
            time.sleep(21)
        back = dt.datetime.now(dt.UTC)
        deadline = time.monotonic() + 40
        while _renewed_at(admin, ns) <= back and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _renewed_at(admin, ns) > back, (
            "the Lease was not renewed after the API server came back"
        )
        held.check()  # still ours: writing goes on
        assert held.lost is None
    assert read_holder(admin, ns, SERVICE) is None, "released at the end"


def test_an_outage_longer_than_the_lease_stops_the_run_writing(
    plane: controlplane.ControlPlane, admin: Kube, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_module, "LEASE_S", 6)
    with ServiceLease(admin, ns, SERVICE, "run-a") as held:
        run_a = dataclasses.replace(admin, fence=held.check)
        write.patch_service(run_a, ns, SERVICE, resource_version=None, annotations={"a": "1"})
        with controlplane.apiserver_outage(plane):
            time.sleep(8)
        # Another run finds the Lease expired and takes the Service over.
        with ServiceLease(admin, ns, SERVICE, "run-b"):
            before = admin.core.read_namespaced_service(SERVICE, ns)
            with pytest.raises(LeaseLost, match="lost Lease"):
                write.patch_service(
                    run_a, ns, SERVICE, resource_version=None, annotations={"a": "2"}
                )
            with pytest.raises(LeaseLost):
                write.scale_deployment(run_a, ns, "anything", 0)
            time.sleep(3)  # a renewal round of run A, had it kept renewing
            after = admin.core.read_namespaced_service(SERVICE, ns)
            assert after.metadata.resource_version == before.metadata.resource_version
            assert read_holder(admin, ns, SERVICE) == "run-b"
            assert held.lost


def test_reading_the_holder_tells_absent_from_unknown(
    plane: controlplane.ControlPlane, admin: Kube, ns: str
) -> None:
    assert read_holder(admin, ns, SERVICE) is None
    stranger = client.ApiClient(admin.api.configuration)
    stranger.set_default_header("Impersonate-User", "someone-without-rights")
    with pytest.raises(Forbidden):
        read_holder(Kube(stranger), ns, SERVICE)
    with controlplane.apiserver_outage(plane), pytest.raises(KubeUnavailable):
        read_holder(admin, ns, SERVICE)


def _skewed_lease(admin: Kube, ns: str, holder: str, renew: dt.datetime, duration_s: int) -> None:
    """A Lease as a holder whose clock is off writes it: renewTime is its own wall clock."""
    stamp = renew.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    admin.coordination.create_namespaced_lease(
        ns,
        {
            "metadata": {"name": lease_name(SERVICE)},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": duration_s,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        },
    )


@contextlib.contextmanager
def _renewing(admin: Kube, ns: str, start: dt.datetime, *, for_s: float) -> Iterator[list[float]]:
    """A skewed holder that renews every 0.5 s for for_s seconds, its renewTime moving on
    from `start` (its clock); yields the time.monotonic() of its last renewal written."""
    last: list[float] = [time.monotonic()]
    stop = threading.Event()

    def renew() -> None:
        began = time.monotonic()
        while not stop.wait(0.5) and time.monotonic() - began < for_s:
            lease = admin.coordination.read_namespaced_lease(lease_name(SERVICE), ns)
            moved = start + dt.timedelta(seconds=time.monotonic() - began)
            lease.spec.renew_time = moved
            admin.coordination.replace_namespaced_lease(lease_name(SERVICE), ns, lease)
            last[0] = time.monotonic()

    thread = threading.Thread(target=renew, daemon=True)
    thread.start()
    try:
        yield last
    finally:
        stop.set()
        thread.join(timeout=10)


@pytest.mark.slow  # the Lease's outages run by default
def test_a_holder_whose_clock_is_behind_and_keeps_renewing_is_not_taken_over(
    admin: Kube, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its renewTime is an hour old by this machine's clock, but it changes: the Lease is
    live, whatever the two clocks say (client-go: expiry from the observed change)."""
    monkeypatch.setattr(lease_module, "LEASE_S", 4)
    hour_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    _skewed_lease(admin, ns, "behind-run", hour_ago, duration_s=4)
    with _renewing(admin, ns, hour_ago, for_s=60):
        with pytest.raises(HandoffInProgress, match="being handed off by behind-run"):
            ServiceLease(admin, ns, SERVICE, "run-b").acquire()
        with pytest.raises(HandoffInProgress, match="behind-run"):
            ServiceLease(admin, ns, SERVICE, "run-b", wait_for="behind-run").acquire()
        assert read_holder(admin, ns, SERVICE) == "behind-run"


@pytest.mark.slow  # the Lease's outages run by default
def test_a_holder_whose_clock_is_ahead_is_taken_over_after_the_duration_on_this_clock(
    admin: Kube, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its renewTime is an hour ahead of this machine's clock; once it stops renewing, the
    Lease is taken leaseDurationSeconds after the last change this run saw, not an hour
    later, and not sooner."""
    monkeypatch.setattr(lease_module, "LEASE_S", 4)
    ahead = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    _skewed_lease(admin, ns, "ahead-run", ahead, duration_s=4)
    started = time.monotonic()
    with _renewing(admin, ns, ahead, for_s=3) as last:
        taker = ServiceLease(admin, ns, SERVICE, "run-b", wait_for="ahead-run")
        taker.acquire()
        taken = time.monotonic()
    assert read_holder(admin, ns, SERVICE) == "run-b"
    # The taker observes a renewal at the earliest when its write returns: 0.2 s of slack.
    assert taken - last[0] >= 4 - 0.2, f"taken {taken - last[0]:.1f} s after the last renewal"
    assert taken - started < 3 + 4 + 5, f"taken only after {taken - started:.1f} s"
    taker.check()

    # A dead holder ahead of this clock, never renewed while watched: taken after 4 s, by a
    # run that was not waiting for it, too.
    admin.coordination.delete_namespaced_lease(lease_name(SERVICE), ns)
    _skewed_lease(admin, ns, "dead-run", ahead, duration_s=4)
    started = time.monotonic()
    ServiceLease(admin, ns, SERVICE, "run-c").acquire()
    waited = time.monotonic() - started
    assert read_holder(admin, ns, SERVICE) == "run-c"
    assert 4 <= waited < 4 + 5, f"taken after {waited:.1f} s"
