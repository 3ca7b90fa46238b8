"""One handoff per Service at a time: a coordination.k8s.io Lease in the namespace.

The holder renews it from a background thread; a run that dies stops renewing and
the Lease expires after LEASE_S, so a rerun can take over. A second handoff for the
same Service while the Lease is live is refused at once.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from types import TracebackType

from flows.errors import PermanentError
from flows.kube.client import Conflict, Kube, NotFound, mapped

LEASE_S = int(os.environ.get("HANDOFF_LEASE_S", "30"))


class HandoffInProgress(PermanentError):
    """Another handoff holds this Service's Lease."""


class _HeldByResumable(Exception):
    """The Lease is still live but its holder's run is the one being resumed."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_name(service: str) -> str:
    return f"handoff-{service}"


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
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, daemon=True, name=self.name)

    def __enter__(self) -> ServiceLease:
        self.acquire()
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.release()

    def _spec(self) -> dict[str, object]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": LEASE_S,
            "renewTime": _micro(_now()),
            "acquireTime": _micro(_now()),
        }

    def acquire(self) -> None:
        deadline = time.monotonic() + LEASE_S + 5
        while True:
            try:
                self._try_acquire()
                return
            except _HeldByResumable:
                if time.monotonic() > deadline:
                    raise HandoffInProgress(
                        f"Service {self.namespace}/{self.name.removeprefix('handoff-')} is "
                        f"being handed off by {self.wait_for}: its Lease {self.name} was still "
                        f"renewed after {LEASE_S + 5} s, so that run is alive; let it finish"
                    ) from None
                time.sleep(1.0)

    def _try_acquire(self) -> None:
        api = self.kube.coordination
        body = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": self._spec()}
        try:
            with mapped(f"create Lease {self.namespace}/{self.name}"):
                api.create_namespaced_lease(self.namespace, body)
            return
        except Conflict:
            pass
        with mapped(f"read Lease {self.namespace}/{self.name}"):
            lease = api.read_namespaced_lease(self.name, self.namespace)
        spec = lease.spec
        expires = (
            spec.renew_time + dt.timedelta(seconds=spec.lease_duration_seconds or LEASE_S)
            if spec.renew_time
            else _now()
        )
        live = spec.holder_identity and expires > _now()
        if live and spec.holder_identity == self.wait_for:
            raise _HeldByResumable
        if live and spec.holder_identity != self.holder:
            raise HandoffInProgress(
                f"Service {self.namespace}/{self.name.removeprefix('handoff-')} is being "
                f"handed off by {spec.holder_identity} "
                f"(Lease {self.name} renewed until {expires:%H:%M:%S}Z); "
                "wait for it to finish, or for its Lease to expire if that run died"
            )
        body["metadata"]["resourceVersion"] = lease.metadata.resource_version
        with mapped(f"take over Lease {self.namespace}/{self.name}"):
            api.replace_namespaced_lease(self.name, self.namespace, body)

    def _renew_loop(self) -> None:
        while not self._stop.wait(LEASE_S / 3):
            try:
                with mapped(f"renew Lease {self.namespace}/{self.name}"):
                    self.kube.coordination.patch_namespaced_lease(
                        self.name, self.namespace, {"spec": {"renewTime": _micro(_now())}}
                    )
            except PermanentError:
                return

    def release(self) -> None:
        """Delete the Lease if this run still holds it (a takeover keeps it)."""
        api = self.kube.coordination
        try:
            with mapped(f"release Lease {self.namespace}/{self.name}"):
                lease = api.read_namespaced_lease(self.name, self.namespace)
                if lease.spec.holder_identity != self.holder:
                    return
                api.delete_namespaced_lease(
                    self.name,
                    self.namespace,
                    body={"preconditions": {"resourceVersion": lease.metadata.resource_version}},
                )
        except (NotFound, Conflict):
            pass
