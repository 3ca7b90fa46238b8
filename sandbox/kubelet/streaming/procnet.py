"""A pod's `/proc/net/tcp` as it would read inside its own network namespace.

Every simulated pod's process listens on a 127.0.0.1 port of this machine, so the host's
table holds every pod's sockets at once. This view keeps the sockets of one pod's ports
and writes them as the pod sees them: its local address is podIP:containerPort; a peer
that is this kubelet's own port-forward dial reads 127.0.0.1 (a runtime's forwarder dials
the pod's loopback), any other peer (the service proxy, as kube-proxy, carrying a
client) reads as the pod network's gateway, never as loopback.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
from collections.abc import Mapping
from pathlib import Path

HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode"
)
FILES = ("/proc/net/tcp", "/proc/net/tcp6")

_lock = threading.Lock()
_own_dials: set[int] = set()  # local ports of this kubelet's port-forward connections


def dialled(port: int) -> None:
    """A port-forward connection from 127.0.0.1:`port` was opened by this kubelet."""
    with _lock:
        _own_dials.add(port)


def hung_up(port: int) -> None:
    with _lock:
        _own_dials.discard(port)


def _hex_addr(ip: str, port: int) -> str:
    # /proc/net/tcp writes the address as the host-order integer of its network bytes.
    packed = socket.inet_aton(ip)
    return f"{struct.unpack('=I', packed)[0]:08X}:{port:04X}"


def _parse_addr(field: str) -> tuple[str, int]:
    addr, port = field.split(":")
    return socket.inet_ntoa(struct.pack("=I", int(addr, 16))), int(port, 16)


def pod_view(
    pod_ip: str, ports: Mapping[int, int], *, host_table: Path = Path("/proc/net/tcp")
) -> str:
    """The IPv4 table of the pod whose containerPorts map to these 127.0.0.1 ports."""
    by_local = {local: container for container, local in ports.items()}
    gateway = str(next(ipaddress.ip_network(f"{pod_ip}/24", strict=False).hosts()))
    with _lock:
        own = set(_own_dials)
    rows: list[str] = []
    for line in host_table.read_text().splitlines()[1:]:
        fields = line.split()
        (lip, lport), (rip, rport) = _parse_addr(fields[1]), _parse_addr(fields[2])
        if lip != "127.0.0.1" or lport not in by_local:
            continue
        peer = rip if fields[3] == "0A" or rport in own else gateway
        local = _hex_addr(pod_ip, by_local[lport])
        remote = _hex_addr(peer, rport) if fields[3] != "0A" else fields[2]
        rows.append(f"{len(rows):4d}: {local} {remote} {' '.join(fields[3:])}")
    return "\n".join([HEADER, *rows]) + "\n"


def read(path: str, pod_ip: str, ports: Mapping[int, int]) -> str:
    """One of FILES as the pod reads it (no IPv6 sockets: every server binds 127.0.0.1)."""
    return pod_view(pod_ip, ports) if path == FILES[0] else HEADER + "\n"
