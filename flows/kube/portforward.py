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
import selectors
import socket
import threading
from collections.abc import Iterator
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

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

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
            sel.register(s, selectors.EVENT_READ)
        while open_reads and not closed.is_set():
            for key, _ in sel.select(timeout=0.5):
                src: socket.socket = key.fileobj  # type: ignore[assignment]
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


@contextlib.contextmanager
def pod_url(kube: Kube, namespace: str, pod: str, port: int) -> Iterator[str]:
    """A base URL reaching the pod's port: the pod IP when running inside the cluster
    (no detour through the apiserver), otherwise a port-forward on 127.0.0.1."""
    if kube.in_cluster:
        with mapped(f"read pod {namespace}/{pod}"):
            ip = kube.core.read_namespaced_pod(pod, namespace).status.pod_ip
        yield f"http://{ip}:{port}"
        return
    with PortForwarder(kube, namespace, pod, port) as forwarder:
        yield forwarder.url
