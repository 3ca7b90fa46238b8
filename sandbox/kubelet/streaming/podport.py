"""One forwarded connection: bytes between a client stream and a pod's local port.

Shared by both port-forward transports. The pod side is the container's 127.0.0.1 port
from the pod table (never the pod IP). Like the CRI runtimes' forwarders, the stream
ends when the pod closes its side; a client half-close (SPDY FIN) becomes a TCP
half-close towards the pod, so a reply still arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from sandbox.kubelet.streaming import procnet

StreamPair = tuple[asyncio.StreamReader, asyncio.StreamWriter]
_READ_BYTES = 64 * 1024


class PortForwardError(RuntimeError):
    """The pod port could not be reached; the message goes to the client's error stream."""


PortOpener = Callable[[int], Awaitable[StreamPair]]


def pod_port_opener(local_port: Callable[[int], int | None], *, pod: str) -> PortOpener:
    """Dial 127.0.0.1:<local port> of a container port, with errors that name both."""

    async def open_port(port: int) -> StreamPair:
        local = local_port(port)
        if local is None:
            raise PortForwardError(f"no running container of pod {pod} serves port {port}")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", local)
        except OSError as exc:
            raise PortForwardError(
                f"dial tcp 127.0.0.1:{local} (container port {port}): {exc.strerror or exc}"
            ) from exc
        procnet.dialled(writer.get_extra_info("sockname")[1])
        return reader, writer

    return open_port


class PodPortStream:
    """Client bytes go in through feed/end_input; pod bytes go out through send."""

    def __init__(
        self, port: int, open_port: PortOpener, send: Callable[[bytes], Awaitable[None]]
    ) -> None:
        self.port = port
        self._open, self._send = open_port, send
        self._inbound: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=64)
        self._done = False

    async def feed(self, data: bytes) -> None:
        await self._put(data)

    async def end_input(self) -> None:
        await self._put(None)  # the client's FIN

    async def _put(self, item: bytes | None) -> None:
        if not self._done:
            await self._inbound.put(item)

    async def run(self) -> str | None:
        """Forward until the pod closes; an error message if the port was unreachable."""
        try:
            reader, writer = await self._open(self.port)
        except PortForwardError as exc:
            self._finish()
            return str(exc)
        to_pod = asyncio.create_task(self._to_pod(writer))
        try:
            while data := await reader.read(_READ_BYTES):
                await self._send(data)
        except ConnectionError:
            pass
        finally:
            self._finish()
            to_pod.cancel()
            writer.close()
            procnet.hung_up(writer.get_extra_info("sockname")[1])
        return None

    async def _to_pod(self, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while (data := await self._inbound.get()) is not None:
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

    def _finish(self) -> None:
        # Free queue slots so a feed blocked on a full queue returns; later feeds drop.
        self._done = True
        while not self._inbound.empty():
            self._inbound.get_nowait()
