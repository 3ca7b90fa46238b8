"""`run_dir/proxy.json`: where the service proxy listens for each Service port.

The proxy rewrites the file atomically after every change; readers (`handoff sandbox
status`, tests) see a complete list or the previous one. `backends` is what the proxy
last applied (after its sync delay): the endpoints new connections go to (pod IP:port,
bookkeeping only), so a caller can wait until a selector change has reached the proxy
before it opens new connections.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, TypeAdapter, ValidationError

ADDRESSES_FILE = "proxy.json"


class ProxyAddress(BaseModel):
    namespace: str
    service: str
    port: int  # the Service port
    name: str = ""  # the Service port's name
    address: str  # 127.0.0.1:N
    backends: list[str] = []  # applied endpoints, podIP:targetPort

    def matches(self, namespace: str, service: str, port: int | str) -> bool:
        wanted = self.port == port if isinstance(port, int) else self.name == port
        return self.namespace == namespace and self.service == service and wanted


class ProxyAddressNotFound(LookupError):
    """No listener for that Service port appeared in time."""


_LIST = TypeAdapter(list[ProxyAddress])


def addresses_file(run_dir: Path) -> Path:
    return run_dir / ADDRESSES_FILE


def write_addresses(run_dir: Path, addresses: list[ProxyAddress]) -> None:
    path = addresses_file(run_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(_LIST.dump_json(addresses, indent=2))
    tmp.replace(path)


def read_addresses(run_dir: Path) -> list[ProxyAddress]:
    """The proxy's listeners; empty when the proxy has not started (or has stopped)."""
    try:
        return _LIST.validate_json(addresses_file(run_dir).read_bytes())
    except (OSError, ValidationError):
        return []


def address_of(
    run_dir: Path, namespace: str, service: str, port: int | str, *, timeout_s: float = 10.0
) -> str:
    """`127.0.0.1:N` for a Service port (number or name), waiting up to timeout_s for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [a for a in read_addresses(run_dir) if a.matches(namespace, service, port)]
        if found:
            return found[0].address
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    known = ", ".join(f"{a.namespace}/{a.service}:{a.port}" for a in read_addresses(run_dir))
    raise ProxyAddressNotFound(
        f"service proxy has no listener for {namespace}/{service} port {port} after "
        f"{timeout_s:.0f} s (listeners: {known or 'none'}; file {addresses_file(run_dir)}): "
        "check that the Service exists with a TCP port and that the proxy runs "
        "(`handoff sandbox status`)"
    )
