"""The proxy's state: Services and EndpointSlices as last seen, one listener per Service
port.

Informer threads post changes; one coroutine applies them in order, so listeners are
opened, updated and closed without locks. A slice belongs to the Service named by its
`kubernetes.io/service-name` label (a Service may have several). What is seen reaches the
listeners in syncs paced as kube-proxy paces its rule syncs (`--iptables-min-sync-period`,
1 s by default, with a burst of 2): changes that arrive while a sync must wait are batched
into the next one, so the data plane follows the API some time after the API shows a
change. After each sync the addresses file is rewritten (only if it changed). Readiness:
the first write after both the Service and the EndpointSlice lists have been applied.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sandbox.proxy.addresses import ProxyAddress, addresses_file, write_addresses
from sandbox.proxy.backends import PodPorts, routable_backends, service_ports
from sandbox.proxy.informer import Obj
from sandbox.proxy.listener import ServiceListener

SERVICES, SLICES = "services", "endpointslices"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
POD_PORTS_FILE = "pod-ports.json"
Key = tuple[str, str]
log = logging.getLogger(__name__)

Mode = Literal["iptables", "userspace"]
MODES: tuple[Mode, ...] = ("iptables", "userspace")
MODE_ENV = "HANDOFF_PROXY_MODE"
MIN_SYNC_PERIOD_ENV = "HANDOFF_PROXY_MIN_SYNC_PERIOD_S"
KUBE_PROXY_MIN_SYNC_PERIOD_S = 1.0  # kube-proxy's --iptables-min-sync-period default
KUBE_PROXY_BURST_SYNCS = 2  # as kube-proxy's sync runner allows


@dataclass(frozen=True)
class ProxySettings:
    """How the proxy behaves. `iptables` (the default): one random endpoint per new
    connection, a refusal is the client's. `userspace`: kube-proxy's removed userspace
    mode, which tried the next endpoint when one refused (forgiving: no real data plane
    does that today). Syncs run at most `burst` at once, then one per min_sync_period_s."""

    mode: Mode = "iptables"
    min_sync_period_s: float = KUBE_PROXY_MIN_SYNC_PERIOD_S
    burst: int = KUBE_PROXY_BURST_SYNCS

    @property
    def retry_next_endpoint(self) -> bool:
        return self.mode == "userspace"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ProxySettings:
        """Defaults, or HANDOFF_PROXY_MODE / HANDOFF_PROXY_MIN_SYNC_PERIOD_S where set."""
        env = dict(os.environ) if env is None else env
        mode = env.get(MODE_ENV) or "iptables"
        if mode not in MODES:
            raise ValueError(f"{MODE_ENV}={mode!r}: expected one of {', '.join(MODES)}")
        period = float(env.get(MIN_SYNC_PERIOD_ENV) or KUBE_PROXY_MIN_SYNC_PERIOD_S)
        if period < 0:
            raise ValueError(f"{MIN_SYNC_PERIOD_ENV}={period}: must be 0 or more")
        return cls(
            mode="userspace" if mode == "userspace" else "iptables", min_sync_period_s=period
        )


class SyncLimiter:
    """A token bucket like kube-proxy's BoundedFrequencyRunner: `burst` syncs may run at
    once, then one per `period_s`; `wait()` returns when the next sync may run."""

    def __init__(self, period_s: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self._period, self._burst, self._clock = period_s, max(1, burst), clock
        self._tokens, self._stamp = float(self._burst), clock()

    def delay_s(self) -> float:
        """Seconds until a sync may run (0: now)."""
        if self._period <= 0:
            return 0.0
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) * self._period

    def take(self) -> None:
        if self._period > 0:
            self._refill()
            self._tokens -= 1

    async def wait(self) -> None:
        while (delay := self.delay_s()) > 0:
            await asyncio.sleep(delay)
        self.take()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) / self._period)
        self._stamp = now


@dataclass(frozen=True)
class Change:
    kind: str  # SERVICES or SLICES
    listing: list[Obj] | None = None  # a full list replaces what was known
    event: str = ""  # ADDED / MODIFIED / DELETED
    obj: Obj | None = None


def _key(obj: Obj) -> Key:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


def _service_key(kind: str, obj: Obj) -> Key:
    """The Service an object is about: itself, or the one a slice names."""
    if kind == SERVICES:
        return _key(obj)
    labels = obj["metadata"].get("labels") or {}
    return obj["metadata"]["namespace"], labels.get(SERVICE_NAME_LABEL, "")


class ServiceProxy:
    def __init__(self, run_dir: Path, settings: ProxySettings | None = None) -> None:
        self._run_dir = run_dir
        self.settings = settings or ProxySettings()
        self._limiter = SyncLimiter(self.settings.min_sync_period_s, self.settings.burst)
        self._pod_ports = PodPorts(run_dir / POD_PORTS_FILE)
        self._known: dict[str, dict[Key, Obj]] = {SERVICES: {}, SLICES: {}}
        self._synced: set[str] = set()
        self._listeners: dict[tuple[str, str, int], ServiceListener] = {}
        self._changes: asyncio.Queue[Change] = asyncio.Queue()
        self._written: list[ProxyAddress] | None = None

    def poster(self, loop: asyncio.AbstractEventLoop) -> Callable[[Change], None]:
        """A thread-safe way to hand this proxy a change."""

        def post(change: Change) -> None:
            loop.call_soon_threadsafe(self._changes.put_nowait, change)

        return post

    async def run(self, on_ready: Callable[[], None]) -> None:
        while True:
            touched = self._apply(await self._changes.get())
            await self._limiter.wait()  # kube-proxy's min sync period
            while not self._changes.empty():  # batch what has queued up meanwhile
                touched |= self._apply(self._changes.get_nowait())
            for key in sorted(touched):
                try:
                    await self._reconcile(key)
                except OSError as exc:  # no port to listen on: say so, retry at the next change
                    log.error("service %s/%s: cannot open its listener: %s", *key, exc)
            if self._synced == {SERVICES, SLICES}:
                first = self._written is None
                self._write()
                if first:
                    on_ready()

    async def close(self) -> None:
        await asyncio.gather(*(listener.abort() for listener in self._listeners.values()))
        self._listeners.clear()
        addresses_file(self._run_dir).unlink(missing_ok=True)

    def _apply(self, change: Change) -> set[Key]:
        """Apply one change; returns the Services it touches."""
        known, kind = self._known[change.kind], change.kind
        if change.listing is not None:
            before = {_service_key(kind, obj) for obj in known.values()}
            known.clear()
            known.update((_key(obj), obj) for obj in change.listing)
            self._synced.add(kind)
            return before | {_service_key(kind, obj) for obj in known.values()}
        assert change.obj is not None
        key = _key(change.obj)
        touched = {_service_key(kind, change.obj)}
        if key in known:
            touched.add(_service_key(kind, known[key]))
        if change.event == "DELETED":
            known.pop(key, None)
        else:
            known[key] = change.obj
        return touched

    async def _reconcile(self, key: Key) -> None:
        service = self._known[SERVICES].get(key)
        wanted = {(*key, p.port): p for p in (service_ports(service) if service else [])}
        slices = [o for o in self._known[SLICES].values() if _service_key(SLICES, o) == key]
        for gone in [k for k in self._listeners if k[:2] == key and k not in wanted]:
            self._listeners.pop(gone).close()
        for listener_key, port in wanted.items():
            listener = self._listeners.get(listener_key)
            if listener is None:
                listener = ServiceListener(
                    *key,
                    port,
                    self._pod_ports,
                    retry_next_endpoint=self.settings.retry_next_endpoint,
                )
                await listener.start()
                self._listeners[listener_key] = listener
            listener.port = port
            backends = routable_backends(slices, port.name)
            if backends != listener.backends:
                log.info("%s: applied %s", listener_key, [str(b) for b in backends] or "none")
            listener.backends = backends

    def _write(self) -> None:
        addresses = [
            ProxyAddress(
                namespace=listener.namespace,
                service=listener.service,
                port=listener.port.port,
                name=listener.port.name,
                address=listener.address,
                backends=[str(b) for b in listener.backends],
            )
            for _, listener in sorted(self._listeners.items())
        ]
        if addresses != self._written:
            write_addresses(self._run_dir, addresses)
            self._written = addresses
