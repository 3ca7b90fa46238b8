"""Drain: before a workload's pods go down, wait until none has a generation in flight.

Called once the Service no longer routes to the workload (its routes verified and the
proxies settled), right before its scale-down or delete. Observes each running pod of
the Deployment, through the apiserver as every other look at a pod (never its IP from
outside the cluster): the server's own metrics where it offers them (vLLM's
`vllm:num_requests_running` + `_waiting`, llama.cpp's `llamacpp:requests_processing` +
`_deferred`, on `/metrics` through a port-forward), else the pod's established client
connections on its serving port (its `/proc/net/tcp`, read by exec; loopback peers are
port-forwards, not clients). Bounded by the pods' terminationGracePeriodSeconds: what the
kubelet would give them anyway. Changes nothing; returns what it saw, for the report.
"""

from __future__ import annotations

import contextlib
import ipaddress
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from flows.baseline import resolve_port
from flows.downtime import DEFAULT_GRACE_S
from flows.kube import read
from flows.kube.client import Kube
from flows.kube.objects import DeploymentSnapshot, owned_by_deployment
from flows.kube.podexec import ExecFailed, exec_output
from flows.kube.portforward import pod_forward

POLL_S = 0.5
ASK_S = 5.0  # one /metrics answer or one exec
# Per engine: the gauges whose sum is the generations in flight; the first names it.
IN_FLIGHT = (
    ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
)
CONNECTIONS = "established connections"
NO_SIGNAL = "none"
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
ESTABLISHED = "01"


class Drained(BaseModel):
    """What the drain of one workload saw: the signal, how long it took, what was left."""

    model_config = ConfigDict(frozen=True)

    workload: str
    pods: list[str]
    signal: str
    waited_s: float
    bound_s: float
    left: int = 0  # generations (or connections) still open when the bound was reached
    detail: str = ""  # why a signal was not used

    def line(self) -> str:
        how = (
            f"{self.left} still in flight at the {self.bound_s:.0f} s grace period"
            if self.left
            else f"drained in {self.waited_s:.1f} s"
        )
        note = f"; {self.detail}" if self.detail else ""
        return f"{self.workload} ({len(self.pods)} pod(s)): {how}, by {self.signal}{note}"


def in_flight_from_metrics(text: str) -> tuple[str, int] | None:
    """(signal, generations in flight) from a Prometheus text page, or None when the page
    has none of the engines' gauges."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            with contextlib.suppress(ValueError, IndexError):
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    for names in IN_FLIGHT:
        if names[0] in values:
            return names[0], int(sum(values.get(n, 0.0) for n in names))
    return None


def _address(field: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """One `ADDR:PORT` of /proc/net/tcp{,6}: each 32-bit word of the address in the
    node's byte order (little-endian on the architectures GPUs come with)."""
    addr, port = field.split(":")
    words = [int(addr[i : i + 8], 16) for i in range(0, len(addr), 8)]
    packed = b"".join(struct.pack("<I", w) for w in words)
    ip = ipaddress.ip_address(packed)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, int(port, 16)
    return ip, int(port, 16)


def client_connections(table: str, port: int) -> int:
    """Established connections to `port` from a non-loopback peer in /proc/net/tcp text."""
    count = 0
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[3] != ESTABLISHED or ":" not in fields[1]:
            continue
        with contextlib.suppress(ValueError):
            (_, local), (peer, _) = _address(fields[1]), _address(fields[2])
            count += local == port and not peer.is_loopback
    return count


class _NoSignal(Exception):
    """Neither metrics nor connections could be read from a pod."""


def _exec_tables(kube: Kube, namespace: str, pod: str, container: str) -> str:
    """`cat` of the pod's TCP tables; _NoSignal on failure."""
    try:
        return exec_output(kube, namespace, pod, container, ["cat", *TCP_TABLES], ASK_S)
    except ExecFailed as exc:
        raise _NoSignal(str(exc)) from exc


@contextlib.contextmanager
def _pod_gauge(
    kube: Kube, namespace: str, pod: str, container: str, port: int, connections: bool
) -> Iterator[tuple[str, Callable[[], int], str]]:
    """(signal, a function counting what is in flight now, why metrics were not used)."""
    with (
        pod_forward(kube, namespace, pod, port) as forward,
        httpx.Client(base_url=forward.url, timeout=ASK_S) as http,
    ):
        why = ""
        try:
            answer = http.get("/metrics")
            found = in_flight_from_metrics(answer.text) if answer.status_code == 200 else None
            why = (
                f"no /metrics on port {port} (HTTP {answer.status_code})"
                if answer.status_code != 200
                else "no in-flight gauge on /metrics"
            )
        except httpx.HTTPError as exc:
            found, why = None, f"/metrics on port {port} unreadable: {exc}"
        if found is not None:

            def metrics() -> int:
                page = http.get("/metrics").text
                return (in_flight_from_metrics(page) or ("", 0))[1]

            yield found[0], metrics, ""
            return
    if not connections:
        raise _NoSignal(
            f"{pod}: {why}; the Service still routes to it, so its clients' connections "
            "stay open and are not waited on"
        )
    tables = _exec_tables(kube, namespace, pod, container)
    client_connections(tables, port)  # read once: a failure shows before the wait

    def open_connections() -> int:
        return client_connections(_exec_tables(kube, namespace, pod, container), port)

    yield CONNECTIONS, open_connections, why


def serving_port(
    deployment: DeploymentSnapshot, service_ports: list[Any], fallback: int | None
) -> tuple[str, int] | None:
    """(container, port) where the Service sends clients on this workload's pods."""
    template = deployment.spec["template"]
    containers = template["spec"].get("containers") or []
    for sp in service_ports:
        port = resolve_port(sp.target_port, template)
        if port is not None:
            owner = next(
                (
                    c["name"]
                    for c in containers
                    if any(p.get("containerPort") == port for p in c.get("ports") or [])
                ),
                containers[0]["name"] if containers else "",
            )
            return owner, port
    declared = [
        (c["name"], int(p["containerPort"])) for c in containers for p in c.get("ports") or []
    ]
    if declared:
        return declared[0]
    return (containers[0]["name"], fallback) if containers and fallback else None


def grace_s(deployment: DeploymentSnapshot) -> float:
    grace = deployment.spec["template"]["spec"].get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE_S if grace is None else float(grace)


def drain(
    kube: Kube,
    namespace: str,
    service: str,
    name: str,
    *,
    port: int | None = None,
    connections: bool = True,
) -> Drained | None:
    """Wait until no running pod of Deployment `name` has a generation in flight, at
    most its grace period; None when it has no running pod (nothing to wait for).
    `port`: the serving port when neither the Service nor the template names one.
    `connections=False`: metrics only, for pods the Service still routes to (their
    clients' kept-alive connections stay open whatever runs on them)."""
    deployment = read.read_deployment(kube, namespace, name)
    if deployment is None or deployment.replicas == 0:
        return None
    pods = [
        p.name
        for p in read.list_pods(kube, namespace, deployment.selector)
        if owned_by_deployment(p, name) and not p.terminating and p.phase == "Running"
    ]
    where = serving_port(deployment, read.read_service(kube, namespace, service).ports, port)
    if not pods or where is None:
        return None
    container, target = where
    bound = grace_s(deployment)
    begun = time.monotonic()
    signals: list[str] = []
    notes: list[str] = []
    left = 0
    with contextlib.ExitStack() as stack:
        gauges: list[Callable[[], int]] = []
        for pod in pods:
            try:
                signal, gauge, why = stack.enter_context(
                    _pod_gauge(kube, namespace, pod, container, target, connections)
                )
            except _NoSignal as exc:
                notes.append(str(exc))
                continue
            signals.append(signal)
            gauges.append(gauge)
            if why:
                notes.append(f"{pod}: {why}")
        while gauges:
            left = sum(_count(g) for g in gauges)
            if left == 0 or time.monotonic() - begun >= bound:
                break
            time.sleep(POLL_S)
    signal = ", ".join(dict.fromkeys(signals)) or NO_SIGNAL
    if left:
        notes.append(
            "clients whose kept-alive connections were opened before the routes changed "
            "still send to these pods (the proxies keep established connections); their "
            "servers close those on SIGTERM"
        )
    if not signals:
        notes.append("the pods stop with their own grace period (SIGTERM) only")
    return Drained(
        workload=name,
        pods=pods,
        signal=signal,
        waited_s=round(time.monotonic() - begun, 2),
        bound_s=bound,
        left=left,
        detail="; ".join(dict.fromkeys(notes))[:1000],
    )


def _count(gauge: Callable[[], int]) -> int:
    """What a pod has in flight; 0 once it cannot be asked (it is gone or not serving)."""
    try:
        return gauge()
    except (httpx.HTTPError, _NoSignal):
        return 0
