"""Reach a pod's port from outside the cluster, as `kubectl port-forward` does.

A listener on 127.0.0.1 tunnels every accepted connection to pod:port through the
API server's pods/portforward subresource (websocket, via the official client), so
httpx and the gates talk to `http://127.0.0.1:N` and never dial a pod IP.

The client's `portforward()` swaps its ApiClient's request method while it opens
the websocket, so the forwarder keeps an ApiClient of its own and opens one tunnel
at a time.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType

from kubernetes import client
from kubernetes.stream import portforward

from flows.kube.client import Kube, mapped

_CHUNK = 65536


class PortForwarder:
    """`with PortForwarder(kube, ns, pod, 8080) as pf: httpx.get(pf.url + "/health")`."""

    def __init__(self, kube: Kube, namespace: str, pod: str, port: int) -> None:
        self.namespace, self.pod, self.port = namespace, pod, port
        self._core = client.CoreV1Api(client.ApiClient(kube.api.configuration))
        self._open_lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._serving: list[threading.Thread] = []
        self.errors: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> PortForwarder:
        accept = threading.Thread(target=self._accept, name=f"pf-{self.pod}", daemon=True)
        accept.start()
        self._threads.append(accept)
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()

    def problems(self, wait_s: float = 2.0) -> list[str]:
        """The failures recorded so far, once the connections in flight have ended (up to
        wait_s): a client can see its connection fail before the error is recorded."""
        deadline = time.monotonic() + wait_s
        for thread in list(self._serving):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        return list(self.errors)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            serve = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._serving.append(serve)
            serve.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with self._open_lock:
                tunnel = portforward(
                    self._core.connect_get_namespaced_pod_portforward,
                    self.pod,
                    self.namespace,
                    ports=str(self.port),
                )
        except Exception as exc:  # recorded and the local connection closed: the caller sees EOF
            self.errors.append(f"port-forward to {self.namespace}/{self.pod}:{self.port}: {exc}")
            conn.close()
            return
        remote = tunnel.socket(self.port)
        try:
            _bridge(conn, remote, self._closed)
        finally:
            error = tunnel.error(self.port)
            if error:
                self.errors.append(f"{self.namespace}/{self.pod}:{self.port}: {error}")
            conn.close()
            tunnel.close()


def _bridge(a: socket.socket, b: socket.socket, closed: threading.Event) -> None:
    """Copy bytes both ways until both directions have ended (half-close aware)."""
    peers = {a: b, b: a}
    open_reads = {a, b}
    with selectors.DefaultSelector() as sel:
        for s in peers:
            sel.register(s, selectors.EVENT_READ, data=s)  # data: the socket, typed
        while open_reads and not closed.is_set():
            for key, _ in sel.select(timeout=0.5):
                src: socket.socket = key.data
                try:
                    data = src.recv(_CHUNK)
                except OSError:
                    data = b""
                if data:
                    try:
                        peers[src].sendall(data)
                        continue
                    except OSError:
                        return
                open_reads.discard(src)
                sel.unregister(src)
                with contextlib.suppress(OSError):
                    peers[src].shutdown(socket.SHUT_WR)


@dataclass(frozen=True)
class Forward:
    """A base URL reaching a pod's port, and what went wrong reaching it."""

    url: str
    problems: Callable[[], list[str]]


# "port-forward" makes a flow inside the cluster port-forward too: for a cluster whose
# pod network it cannot reach (the sandbox's pod IPs are bookkeeping, never routed).
POD_ACCESS_ENV = "HANDOFF_POD_ACCESS"
_ACCESS_MODES = ("pod-ip", "port-forward")


def dials_pod_ip(kube: Kube) -> bool:
    """Whether pods are reached at their IP: inside the cluster, unless $HANDOFF_POD_ACCESS
    says port-forward."""
    mode = os.environ.get(POD_ACCESS_ENV) or "pod-ip"
    if mode not in _ACCESS_MODES:
        raise ValueError(
            f"{POD_ACCESS_ENV}={mode!r}: expected one of {list(_ACCESS_MODES)}; "
            "unset it to reach pods at their IP inside the cluster"
        )
    return kube.in_cluster and mode == "pod-ip"


@contextlib.contextmanager
def pod_forward(kube: Kube, namespace: str, pod: str, port: int) -> Iterator[Forward]:
    """The pod's port: the pod IP when running inside the cluster (no detour through the
    apiserver; see dials_pod_ip), otherwise a port-forward on 127.0.0.1 whose failures
    (the kubelet's message, a refused upgrade) `problems()` returns, for the report."""
    if dials_pod_ip(kube):
        with mapped(f"read pod {namespace}/{pod}"):
            status = kube.core.read_namespaced_pod(pod, namespace).status
        ip = status.pod_ip if status is not None else None
        yield Forward(url=f"http://{ip}:{port}", problems=list)
        return
    with PortForwarder(kube, namespace, pod, port) as forwarder:
        yield Forward(url=forwarder.url, problems=forwarder.problems)


def problems_note(problems: list[str]) -> str:
    """The port-forward failures as one sentence to append to a reason ('' if none)."""
    unique = list(dict.fromkeys(problems))
    return f"; port-forward failed: {'; '.join(unique[:3])}" if unique else ""
