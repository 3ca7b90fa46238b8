"""WebSocket channels (`channel.k8s.io`) as the 1.20 kubelet speaks them.

The handshake follows golang.org/x/net/websocket with the kubelet's protocol check
(wsstream): the first protocol the client offers that the server supports wins, no
offer means the plain binary protocol, and no match answers 403 with an empty body.
Each message is `[channel byte] + data` (binary) or `['0'+channel] + base64(data)`
(text, `base64.channel.k8s.io`). Framing, masking and control frames are left to the
`websockets` sans-I/O protocol.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import re

from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.server import ServerProtocol

from sandbox.kubelet.streaming.http import Request, response_head, send_text

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_UPGRADE_TOKEN = re.compile(r"(^|.*,\s*)upgrade($|\s*,)")
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def is_websocket_request(request: Request) -> bool:
    """wsstream.IsWebSocketRequest: `Upgrade: websocket` and an `upgrade` Connection token."""
    return request.header("Upgrade").lower() == "websocket" and bool(
        _UPGRADE_TOKEN.match(request.header("Connection").lower())
    )


def select_protocol(offered: list[str], supported: dict[str, bool]) -> str | None:
    for protocol in offered or [""]:
        if protocol in supported:
            return protocol
    return None


async def accept(
    request: Request, writer: asyncio.StreamWriter, supported: dict[str, bool]
) -> ChannelSocket | None:
    """Answer the upgrade; a socket on success, None once a refusal has been sent.

    `supported` maps each protocol name to True when its messages are binary.
    """
    key = request.header("Sec-WebSocket-Key")
    if request.method != "GET":
        await send_text(writer, 405, "bad method")
        return None
    if not key:
        await send_text(writer, 400, "mismatch challenge/response")
        return None
    if request.header("Sec-WebSocket-Version") != "13":
        await send_text(writer, 400, "bad protocol version", {"Sec-WebSocket-Version": "13"})
        return None
    protocol = select_protocol(request.header_tokens("Sec-WebSocket-Protocol"), supported)
    if protocol is None:
        writer.write(response_head(403, {"Content-Length": "0", "Connection": "close"}))
        await writer.drain()
        return None
    digest = hashlib.sha1((key + _GUID).encode()).digest()
    headers = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Accept": base64.b64encode(digest).decode(),
        **({"Sec-WebSocket-Protocol": protocol} if protocol else {}),
    }
    writer.write(response_head(101, headers))
    await writer.drain()
    return ChannelSocket(writer, binary=supported[protocol])


class ChannelSocket:
    """Channel messages over an accepted websocket connection."""

    def __init__(self, writer: asyncio.StreamWriter, *, binary: bool) -> None:
        self._writer, self._binary = writer, binary
        self._ws = ServerProtocol(state=State.OPEN, max_size=MAX_MESSAGE_BYTES)
        self._messages: collections.deque[tuple[int, bytes]] = collections.deque()
        self._fragments: list[bytes | bytearray | memoryview] = []

    async def send(self, channel: int, data: bytes) -> None:
        if self._ws.state is not State.OPEN:
            return
        if self._binary:
            self._ws.send_binary(bytes([channel]) + data)
        else:
            self._ws.send_text(bytes([ord("0") + channel]) + base64.b64encode(data))
        await self._flush()

    async def receive(self, reader: asyncio.StreamReader) -> tuple[int, bytes] | None:
        """The next (channel, data) message; None once the peer closed or went away."""
        while not self._messages:
            if self._ws.state is State.CLOSED:
                return None
            data = await reader.read(64 * 1024)
            if data:
                self._ws.receive_data(data)
            else:
                self._ws.receive_eof()
            self._collect()
            await self._flush()
        return self._messages.popleft()

    async def close(self) -> None:
        """Send a normal close frame (as x/net/websocket's Close does)."""
        if self._ws.state is State.OPEN:
            self._ws.send_close(1000)
            await self._flush()

    def _collect(self) -> None:
        for frame in self._ws.events_received():  # opened past the handshake: frames only
            if not isinstance(frame, Frame):
                continue
            if frame.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                self._fragments.append(frame.data)
                if frame.fin:
                    self._decode(b"".join(self._fragments))
                    self._fragments.clear()

    def _decode(self, message: bytes) -> None:
        if not message:
            return
        if self._binary:
            self._messages.append((message[0], message[1:]))
        else:
            self._messages.append((message[0] - ord("0"), base64.b64decode(message[1:])))

    async def _flush(self) -> None:
        # An empty chunk asks for a TCP half-close, which TLS cannot do: the caller closes.
        for chunk in self._ws.data_to_send():
            if chunk:
                self._writer.write(chunk)
        await self._writer.drain()
