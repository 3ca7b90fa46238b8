"""The kubelet's HTTPS API as the apiserver dials it: container logs, port-forward and
exec (of the one command a simulated container has: sandbox.kubelet.streaming.exec_ws).

TLS with the kubelet's serving certificate; every client must present a certificate
signed by the sandbox CA (the apiserver presents apiserver-kubelet-client.crt). The
kubelet's authorization step (a SubjectAccessReview per request) is not reproduced:
holding a CA-signed client certificate is enough. Routes, status codes and error texts
follow the 1.20 kubelet (pkg/kubelet/server). The server runs an asyncio loop in a
daemon thread; `RunningServer.stop()` closes it and every open connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import threading
from dataclasses import dataclass

from sandbox.certs import Pki
from sandbox.kubelet.streaming import http
from sandbox.kubelet.streaming.containerlogs import serve_container_logs
from sandbox.kubelet.streaming.exec_ws import serve_exec
from sandbox.kubelet.streaming.podport import pod_port_opener
from sandbox.kubelet.streaming.portforward_spdy import serve_spdy
from sandbox.kubelet.streaming.portforward_ws import (
    PortQueryError,
    serve_websocket,
    websocket_ports,
)
from sandbox.kubelet.streaming.views import PodLookup
from sandbox.kubelet.streaming.websocket import is_websocket_request


def tls_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.kubelet_crt, pki.kubelet_key)
    context.load_verify_locations(cafile=pki.ca_crt)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


@dataclass
class RunningServer:
    port: int
    _loop: asyncio.AbstractEventLoop
    _thread: threading.Thread
    _server: asyncio.Server

    def stop(self) -> None:
        """Stop listening, end open connections, stop the loop thread."""
        if not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(_shutdown(self._server), self._loop)
        future.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


async def _shutdown(server: asyncio.Server) -> None:
    server.close()
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def start_server(
    table: PodLookup, *, pki: Pki, host: str = "127.0.0.1", port: int = 0
) -> RunningServer:
    """Listen on host:port (0: a free port) and serve from a background thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="kubelet-server", daemon=True)
    thread.start()
    handler = _Handler(table)
    start = asyncio.start_server(
        handler.serve, host, port, ssl=tls_context(pki), limit=http.MAX_HEAD_BYTES
    )
    server = asyncio.run_coroutine_threadsafe(start, loop).result(timeout=10)
    bound = server.sockets[0].getsockname()[1]
    return RunningServer(port=bound, _loop=loop, _thread=thread, _server=server)


class _Handler:
    def __init__(self, table: PodLookup) -> None:
        self._table = table

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await http.read_request(reader)
            if request is not None:
                await self._route(request, reader, writer)
        except http.BadRequest as exc:
            with contextlib.suppress(ConnectionError):
                await http.send_text(writer, 400, str(exc))
        except (ConnectionError, ssl.SSLError):
            pass  # the peer went away; nothing to answer
        except asyncio.CancelledError:
            pass  # stop(): end quietly (asyncio logs a cancelled connection callback)
        finally:
            writer.close()

    async def _route(
        self, request: http.Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        match request.segments:
            case ("healthz",):
                await http.send_text(writer, 200, "ok")
            case ("containerLogs", namespace, pod, container) if request.method == "GET":
                await serve_container_logs(
                    request,
                    reader,
                    writer,
                    table=self._table,
                    namespace=namespace,
                    pod=pod,
                    container=container,
                )
            case ("portForward", namespace, pod, *uid) if len(uid) <= 1 and request.method in (
                "GET",
                "POST",
            ):
                await self._port_forward(request, reader, writer, namespace, pod, "".join(uid))
            case ("exec", namespace, pod, *rest) if len(rest) in (1, 2) and request.method in (
                "GET",
                "POST",
            ):
                await self._exec(request, writer, namespace, pod, rest[-1])
            case _:
                await http.send_text(writer, 404, "404 page not found\n")

    async def _exec(
        self,
        request: http.Request,
        writer: asyncio.StreamWriter,
        namespace: str,
        pod: str,
        container: str,
    ) -> None:
        found = self._table.lookup(namespace, pod)
        running = found.containers.get(container) if found is not None else None
        if found is None or running is None or not running.running:
            what = "pod does not exist" if found is None else f"container not found ({container!r})"
            await http.send_text(writer, 404, what)
            return
        if not is_websocket_request(request):
            await http.send_text(writer, 400, "exec needs a websocket upgrade (v4.channel.k8s.io)")
            return
        await serve_exec(request, writer, pod_ip=found.pod_ip, ports=running.ports)

    async def _port_forward(
        self,
        request: http.Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        namespace: str,
        pod: str,
        uid: str,
    ) -> None:
        websocket = is_websocket_request(request)
        try:
            ports = websocket_ports(request.query) if websocket else []
        except PortQueryError as exc:
            await http.send_text(writer, 400, str(exc))
            return
        found = self._table.lookup(namespace, pod)
        if found is None or (uid and found.uid != uid):
            text = "pod does not exist" if found is None else "pod not found"
            await http.send_text(writer, 404, text)
            return
        local_port = functools.partial(self._table.local_port, namespace, pod)
        opener = pod_port_opener(local_port, pod=f"{namespace}/{pod}")
        describe = f"{namespace}/{pod}, uid {found.uid}"
        if websocket:
            await serve_websocket(
                request, reader, writer, ports=ports, open_port=opener, describe=describe
            )
        else:
            await serve_spdy(request, reader, writer, open_port=opener, describe=describe)
