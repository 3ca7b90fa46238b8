"""Pod IPs from the cluster's pod CIDR: unique per live pod, bookkeeping only.

Endpoints refuse loopback addresses, so pods get private-range IPs that nothing ever
dials (the service proxy maps them to 127.0.0.1 ports through pod-ports.json).
Addresses are handed out round-robin, so a deleted pod's IP is not reused at once.
"""

from __future__ import annotations

import ipaddress
import threading


class IpPool:
    def __init__(self, cidr: str) -> None:
        self._net = ipaddress.ip_network(cidr)
        self._lock = threading.Lock()
        self._owner: dict[str, str] = {}  # ip -> pod uid
        self._next = 2  # .0 is the network, .1 by convention the gateway

    def claim(self, uid: str, ip: str | None = None) -> str:
        """The pod's IP: ``ip`` if it already had one (a kubelet restart), else a free one."""
        with self._lock:
            if ip and self._owner.get(ip, uid) == uid and ipaddress.ip_address(ip) in self._net:
                self._owner[ip] = uid
                return ip
            for _ in range(self._net.num_addresses):
                candidate = str(self._net.network_address + self._next)
                self._next = self._next + 1 if self._next + 2 < self._net.num_addresses else 2
                if candidate not in self._owner:
                    self._owner[candidate] = uid
                    return candidate
        raise RuntimeError(f"pod CIDR {self._net} is exhausted: delete pods or widen pod_cidr")

    def release(self, uid: str) -> None:
        with self._lock:
            for ip in [ip for ip, owner in self._owner.items() if owner == uid]:
                del self._owner[ip]
