"""The proxy's state: Services and EndpointSlices as last seen, one listener per Service
port.

Informer threads post changes; one coroutine applies them in order, so listeners are
opened, updated and closed without locks. A slice belongs to the Service named by its
`kubernetes.io/service-name` label (a Service may have several). After each batch of
changes the addresses file is rewritten (only if it changed). Readiness: the first
write after both the Service and the EndpointSlice lists have been applied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sandbox.proxy.addresses import ProxyAddress, addresses_file, write_addresses
from sandbox.proxy.backends import PodPorts, ready_backends, service_ports
from sandbox.proxy.informer import Obj
from sandbox.proxy.listener import ServiceListener

SERVICES, SLICES = "services", "endpointslices"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
POD_PORTS_FILE = "pod-ports.json"
Key = tuple[str, str]
log = logging.getLogger(__name__)


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
    def __init__(self, run_dir: Path) -> None:
        self._run_dir = run_dir
        self._pod_ports = PodPorts(run_dir / POD_PORTS_FILE)
        self._known: dict[str, dict[Key, Obj]] = {SERVICES: {}, SLICES: {}}
        self._synced: set[str] = set()
        self._listeners: dict[tuple[str, str, int], ServiceListener] = {}
        self._changes: asyncio.Queue[Change] = asyncio.Queue()
        self._written: list[ProxyAddress] | None = None

    def poster(self, loop: asyncio.AbstractEventLoop) -> Callable[[Change], None]:
        """A thread-safe way to hand this proxy a change."""
        return lambda change: loop.call_soon_threadsafe(self._changes.put_nowait, change)

    async def run(self, on_ready: Callable[[], None]) -> None:
        while True:
            touched = self._apply(await self._changes.get())
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
                listener = ServiceListener(*key, port, self._pod_ports)
                await listener.start()
                self._listeners[listener_key] = listener
            listener.port = port
            listener.backends = ready_backends(slices, port.name)

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
