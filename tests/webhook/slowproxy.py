"""A busy server, as its clients see it: a TCP relay on 127.0.0.1 in front of a real
server that holds back each request containing a marker for a while, then passes it on
unchanged (the server answers it as usual)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress


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
    ready: list[int] = []
    started = threading.Event()

    async def serve(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(
            _pump(client_r, server_w, marker.encode(), delay_s),
            _pump(server_r, client_w, b"", 0.0),
        )

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        ready.append(server.sockets[0].getsockname()[1])
        started.set()
        async with server:
            await server.serve_forever()

    def run() -> None:
        asyncio.set_event_loop(loop)
        with suppress(asyncio.CancelledError):
            loop.run_until_complete(main())

    thread = threading.Thread(target=run, name="slow-relay", daemon=True)
    thread.start()
    assert started.wait(30), "the slow relay did not start"
    try:
        yield ready[0]
    finally:
        loop.call_soon_threadsafe(lambda: [task.cancel() for task in asyncio.all_tasks()])
        thread.join(timeout=10)
        loop.close()
