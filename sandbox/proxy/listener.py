"""One Service port's listener on 127.0.0.1, reaching endpoints through the 127.0.0.1 port
the kubelet recorded for each.

The default is kube-proxy's iptables (and IPVS, nftables) behaviour: each new connection
is sent to ONE endpoint chosen at random among those the proxy last applied; if that
endpoint refuses, or has no local port (a pod whose process is gone), the client
connection is reset: the refusal is the client's, nothing tries another endpoint. The
forgiving behaviour of kube-proxy's userspace mode (removed in Kubernetes 1.26), which
tried the next endpoint round robin until one accepted, is `retry_next_endpoint=True`.

Replacing `backends` changes where new connections go; connections already spliced keep
their backend until one side closes (as conntrack keeps them). With no endpoint the
client connection is reset, as a kernel answering for a Service without endpoints would
refuse it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import struct

from sandbox.proxy.backends import Backend, PodPorts, ServicePort

log = logging.getLogger(__name__)
_READ_BYTES = 64 * 1024


class ServiceListener:
    def __init__(
        self,
        namespace: str,
        service: str,
        port: ServicePort,
        pod_ports: PodPorts,
        *,
        retry_next_endpoint: bool = False,
        rng: random.Random | None = None,
    ):
        self.namespace, self.service, self.port = namespace, service, port
        self.backends: list[Backend] = []
        self.retry_next_endpoint = retry_next_endpoint
        self._pod_ports = pod_ports
        self._rng = rng or random.Random()
        self._next = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        assert self._server is not None, "listener not started"
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    def close(self) -> None:
        """Stop accepting; connections in flight run to their end."""
        if self._server is not None:
            self._server.close()

    async def abort(self) -> None:
        """Stop accepting and cut connections in flight (proxy shutdown)."""
        self.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            upstream = await self._dial()
            if upstream is None:
                _reset(writer)
                return
            await splice((reader, writer), upstream)
        except asyncio.CancelledError:
            pass  # abort(): end quietly (asyncio logs a cancelled connection callback)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _dial(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        candidates = list(self.backends)
        if not candidates:
            return None
        if not self.retry_next_endpoint:  # iptables: one endpoint, its answer is final
            return await self._connect(self._rng.choice(candidates))
        start, self._next = self._next % len(candidates), self._next + 1
        for backend in candidates[start:] + candidates[:start]:
            if (upstream := await self._connect(backend)) is not None:
                return upstream
        return None

    async def _connect(
        self, backend: Backend
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        local = self._pod_ports.local_port(backend)
        if local is None:
            log.warning("%s: no local port recorded for endpoint %s", self._label, backend)
            return None
        try:
            return await asyncio.open_connection("127.0.0.1", local)
        except OSError as exc:
            log.warning("%s: endpoint %s (127.0.0.1:%d): %s", self._label, backend, local, exc)
            return None

    @property
    def _label(self) -> str:
        return f"{self.namespace}/{self.service}:{self.port.port}"


def _reset(writer: asyncio.StreamWriter) -> None:
    # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """Copy both ways. A clean end of one direction is passed on as a half-close and the
    other direction may go on; a broken one (reset, error) ends both at once."""
    directions = {asyncio.ensure_future(_copy(*pair)) for pair in ((a[0], b[1]), (b[0], a[1]))}
    try:
        done, pending = await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
        if pending and all(task.result() for task in done):
            await asyncio.wait(pending)
    finally:
        for task in directions:
            task.cancel()
        a[1].close()
        b[1].close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Copy to the end; True if it ended cleanly (EOF passed on as a half-close)."""
    try:
        while data := await reader.read(_READ_BYTES):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        return True
    except ConnectionError:
        return False
