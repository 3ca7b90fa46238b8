"""A busy server, as its clients see it: a TCP relay on 127.0.0.1 in front of a real
server that holds back each request containing a marker for a while, then passes it on
unchanged (the server answers it as usual)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, marker: bytes, delay_s: float
) -> None:
    try:
        while chunk := await reader.read(65536):
            if marker and marker in chunk:
                await asyncio.sleep(delay_s)
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


@contextmanager
def slow_relay(upstream_port: int, *, marker: str, delay_s: float) -> Iterator[int]:
    """Relay 127.0.0.1:<port yielded> to 127.0.0.1:upstream_port; requests containing
    marker reach the server delay_s late."""
    loop = asyncio.new_event_loop()
    ports: list[int] = []
    started = threading.Event()
    stop = asyncio.Event()
    connections: set[asyncio.Task[None]] = set()

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(
            _pump(client_r, server_w, marker.encode(), delay_s),
            _pump(server_r, client_w, b"", 0.0),
        )

    def serve(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = loop.create_task(relay(client_r, client_w))
        connections.add(task)
        task.add_done_callback(connections.discard)

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        ports.append(server.sockets[0].getsockname()[1])
        started.set()
        await stop.wait()
        server.close()
        for task in list(connections):
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(30), "the slow relay did not start"
    try:
        yield ports[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        loop.close()
