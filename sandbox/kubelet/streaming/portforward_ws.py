"""Port-forward over WebSocket, as the 1.20 kubelet serves it.

This is what the official Python client's `portforward` sends through the apiserver.
The ports come from `?port=` (the apiserver turns the client's `ports` into `port`);
per port, channel 2i carries data and 2i+1 errors, and each channel opens with the
2-byte little-endian port number. The connection closes once every port's pod side
has closed, or when the client closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import struct

from sandbox.kubelet.streaming import websocket
from sandbox.kubelet.streaming.http import Request
from sandbox.kubelet.streaming.podport import PodPortStream, PortOpener

# The port-forward websocket protocols of the 1.20 kubelet; True: binary messages.
WEBSOCKET_PROTOCOLS = {"": True, "v4.channel.k8s.io": True, "v4.base64.channel.k8s.io": False}


class PortQueryError(ValueError):
    """`?port=` is missing or malformed (the kubelet answers 400)."""


def websocket_ports(query: dict[str, list[str]]) -> list[int]:
    """The kubelet's NewV4Options: every `port` value, comma lists allowed, 1..65535."""
    values = query.get("port")
    if not values:
        raise PortQueryError('query parameter "port" is required')
    ports = []
    for value in values:
        if not value:
            raise PortQueryError('query parameter "port" cannot be empty')
        for item in value.split(","):
            if not item.isdigit() or int(item) > 65535:
                raise PortQueryError(f'unable to parse "{value}" as a port')
            if int(item) < 1:
                raise PortQueryError(f'port "{value}" must be > 0')
            ports.append(int(item))
    return ports


async def serve_websocket(
    request: Request,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    ports: list[int],
    open_port: PortOpener,
    describe: str,
) -> None:
    """Accept the upgrade and forward; describe names the pod in error messages."""
    sock = await websocket.accept(request, writer, WEBSOCKET_PROTOCOLS)
    if sock is None:
        return
    streams = []
    for index, port in enumerate(ports):
        channel = 2 * index
        streams.append(PodPortStream(port, open_port, functools.partial(sock.send, channel)))
        for announce in (channel, channel + 1):
            await sock.send(announce, struct.pack("<H", port))

    async def forward(index: int, stream: PodPortStream) -> None:
        if (error := await stream.run()) is not None:
            message = f"error forwarding port {stream.port} to pod {describe}: {error}"
            await sock.send(2 * index + 1, message.encode())

    forwards = asyncio.gather(*(forward(i, s) for i, s in enumerate(streams)))
    inbound = asyncio.ensure_future(_client_to_pods(sock, reader, streams))
    try:
        waiting: list[asyncio.Future[list[None]] | asyncio.Future[None]] = [forwards, inbound]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        forwards.cancel()
        inbound.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await forwards
        with contextlib.suppress(ConnectionError):
            await sock.close()


async def _client_to_pods(
    sock: websocket.ChannelSocket, reader: asyncio.StreamReader, streams: list[PodPortStream]
) -> None:
    # Messages on error channels (odd numbers) are ignored, as wsstream's write-only
    # channels do; the connection ends when the client closes it.
    while (message := await sock.receive(reader)) is not None:
        channel, data = message
        if channel % 2 == 0 and channel // 2 < len(streams):
            await streams[channel // 2].feed(data)
