"""Port-forward over SPDY/3.1 (`portforward.k8s.io`), as the 1.20 kubelet serves kubectl.

After the upgrade the client opens two streams per forwarded connection, an error
stream and a data stream, both carrying `port`, `streamType` and `requestID` headers;
each is accepted with an empty SYN_REPLY. When both streams of a request have arrived
the pod port is dialled; data frames go both ways; when the pod side closes, the
error stream and then the data stream are finished (FIN), as the kubelet's deferred
Close calls do. A pair still incomplete after STREAM_CREATION_TIMEOUT_S is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from sandbox.kubelet.streaming import spdy
from sandbox.kubelet.streaming.http import Request, response_head, send_text
from sandbox.kubelet.streaming.podport import PodPortStream, PortOpener

PROTOCOL = "portforward.k8s.io"
STREAM_CREATION_TIMEOUT_S = 30.0
log = logging.getLogger(__name__)


def handshake_error(request: Request) -> tuple[int, str, dict[str, str]] | None:
    """httpstream.Handshake plus the SPDY upgrade check: (status, text, headers) or None."""
    offered = request.header_tokens("X-Stream-Protocol-Version")
    if not offered:
        return 400, "unable to upgrade: X-Stream-Protocol-Version is required", {}
    if PROTOCOL not in offered:
        text = (
            "unable to upgrade: unable to negotiate protocol: "
            f"client supports {offered}, server accepts ['{PROTOCOL}']"
        )
        return 403, text, {"X-Accepted-Stream-Protocol-Versions": PROTOCOL}
    if "upgrade" not in request.header("Connection").lower() or (
        "spdy/3.1" not in request.header("Upgrade").lower()
    ):
        return 400, "unable to upgrade: missing upgrade headers in request", {}
    return None


def stream_header_error(frame: spdy.Frame) -> str | None:
    """Why the kubelet would reset this new stream (httpStreamReceived), or None."""
    port = frame.header("port")
    if not port:
        return '"port" header is required'
    if not port.isdigit() or int(port) > 65535:
        return f'unable to parse "{port}" as a port'
    if int(port) < 1:
        return f'port "{port}" must be > 0'
    kind = frame.header("streamType")
    if not kind:
        return '"streamType" header is required'
    return None if kind in ("error", "data") else f'invalid stream type "{kind}"'


async def serve_spdy(
    request: Request,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    open_port: PortOpener,
    describe: str,
) -> None:
    if (refusal := handshake_error(request)) is not None:
        status, text, headers = refusal
        await send_text(writer, status, text, headers)
        return
    upgrade = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
    writer.write(response_head(101, {**upgrade, "X-Stream-Protocol-Version": PROTOCOL}))
    await writer.drain()
    await _Session(reader, writer, open_port, describe).run()


@dataclass
class _Pair:
    request_id: str
    error_id: int | None = None
    data_id: int | None = None
    stream: PodPortStream | None = None
    task: asyncio.Task[None] | None = None


class _Session:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        open_port: PortOpener,
        describe: str,
    ) -> None:
        self._reader, self._writer = reader, writer
        self._open, self._describe = open_port, describe
        self._codec = spdy.SpdyCodec()
        self._pairs: dict[str, _Pair] = {}
        self._by_stream: dict[int, _Pair] = {}

    async def run(self) -> None:
        try:
            while (frame := await self._codec.read(self._reader)) is not None:
                if frame.kind == spdy.GOAWAY:
                    break
                await self._dispatch(frame)
        except (spdy.SpdyError, ValueError) as exc:  # zlib.error and struct.error too
            log.warning("port-forward to %s: bad SPDY input: %s", self._describe, exc)
        finally:
            tasks = [p.task for p in self._pairs.values() if p.task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _dispatch(self, frame: spdy.Frame) -> None:
        if frame.kind == spdy.SYN_STREAM:
            await self._on_new_stream(frame)
        elif frame.kind == 0:
            await self._on_data(frame)
        elif frame.kind == spdy.RST_STREAM and (pair := self._by_stream.get(frame.stream_id)):
            self._forget(pair)
        elif frame.kind == spdy.PING and frame.stream_id % 2 == 1:  # client pings are odd
            await self._write(spdy.ping(frame.stream_id))

    async def _on_new_stream(self, frame: spdy.Frame) -> None:
        if (error := stream_header_error(frame)) is not None:
            log.warning("port-forward to %s: stream rejected: %s", self._describe, error)
            await self._write(spdy.rst_stream(frame.stream_id, spdy.RST_CANCEL))
            return
        await self._write(self._codec.syn_reply(frame.stream_id))
        pair = self._pair_for(frame)
        self._by_stream[frame.stream_id] = pair
        if frame.header("streamType") == "error":
            pair.error_id = frame.stream_id
        else:
            pair.data_id = frame.stream_id
            send_id = frame.stream_id
            pair.stream = PodPortStream(
                int(frame.header("port")),
                self._open,
                lambda data: self._write(spdy.data_frame(send_id, data)),
            )
        if pair.error_id is not None and pair.stream is not None and pair.task is None:
            pair.task = asyncio.create_task(self._forward(pair))

    def _pair_for(self, frame: spdy.Frame) -> _Pair:
        request_id = frame.header("requestID")
        if not request_id:  # as the kubelet derives it for clients that send none
            offset = 0 if frame.header("streamType") == "error" else 2
            request_id = str(frame.stream_id - offset)
        if request_id not in self._pairs:
            self._pairs[request_id] = _Pair(request_id)
            loop = asyncio.get_running_loop()
            loop.call_later(STREAM_CREATION_TIMEOUT_S, self._expire, request_id)
        return self._pairs[request_id]

    def _expire(self, request_id: str) -> None:
        pair = self._pairs.get(request_id)
        if pair is not None and pair.task is None:
            log.warning("port-forward to %s: timed out waiting for streams", self._describe)
            self._forget(pair)

    async def _on_data(self, frame: spdy.Frame) -> None:
        pair = self._by_stream.get(frame.stream_id)
        if pair is None or pair.stream is None or frame.stream_id != pair.data_id:
            return  # the client only ever finishes its error stream; nothing to forward
        if frame.data:
            await pair.stream.feed(frame.data)
        if frame.fin:
            await pair.stream.end_input()

    async def _forward(self, pair: _Pair) -> None:
        assert pair.stream is not None and pair.error_id is not None and pair.data_id is not None
        error = await pair.stream.run()
        if error is not None:
            message = f"error forwarding port {pair.stream.port} to pod {self._describe}: {error}"
            await self._write(spdy.data_frame(pair.error_id, message.encode()))
        await self._write(spdy.data_frame(pair.error_id, b"", fin=True))
        await self._write(spdy.data_frame(pair.data_id, b"", fin=True))
        self._forget(pair, cancel=False)

    def _forget(self, pair: _Pair, *, cancel: bool = True) -> None:
        self._pairs.pop(pair.request_id, None)
        for stream_id in (pair.error_id, pair.data_id):
            self._by_stream.pop(stream_id or 0, None)
        if cancel and pair.task is not None:
            pair.task.cancel()

    async def _write(self, frame: bytes) -> None:
        self._writer.write(frame)
        await self._writer.drain()
