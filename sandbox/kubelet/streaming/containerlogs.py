"""`GET /containerLogs/{namespace}/{pod}/{container}`, answered as the 1.20 kubelet does.

Refusals use the kubelet's status codes and wording (404 for an unknown pod, 400 for a
container that has not started or has no previous run); a followed log ends when the
container stops or restarts, or when the client goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

from sandbox.kubelet.streaming import http, logs
from sandbox.kubelet.streaming.logopts import LogOptions, LogQueryError, parse_log_options
from sandbox.kubelet.streaming.views import PodLookup, PodView


async def serve_container_logs(
    request: http.Request,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    table: PodLookup,
    namespace: str,
    pod: str,
    container: str,
) -> None:
    try:
        opts = parse_log_options(request.query, dt.datetime.now(dt.UTC))
    except LogQueryError as exc:
        await http.send_text(writer, exc.status, str(exc))
        return
    found = table.lookup(namespace, pod)
    if found is None:
        await http.send_text(writer, 404, f'pod "{pod}" does not exist')
        return
    try:
        path, still_writing = _log_source(found, table, namespace, pod, container, opts)
        body = http.ChunkedBody(writer)
        work = logs.stream_log(path, opts, still_writing=still_writing, out=body.write)
        if await _until_disconnect(reader, work):
            await body.end()
    except logs.LogsUnavailable as exc:
        await http.send_text(writer, 400, str(exc))


def _log_source(
    found: PodView, table: PodLookup, namespace: str, pod: str, container: str, opts: LogOptions
) -> tuple[Path, Callable[[], bool]]:
    """The file to read and whether its writer still runs; refusals as the kubelet words them."""
    runtime = found.containers.get(container)
    if opts.previous:
        previous = runtime.previous_log_path if runtime is not None else None
        if previous is None or not previous.exists():
            raise logs.LogsUnavailable(
                f'previous terminated container "{container}" in pod "{pod}" not found'
            )
        return previous, lambda: False
    if runtime is None or not runtime.log_path.exists():
        raise logs.LogsUnavailable(
            f'container "{container}" in pod "{pod}" is waiting to start - no logs yet'
        )
    path = runtime.log_path

    def still_writing() -> bool:
        # False once the container stopped or restarted (a new run writes a new file).
        now = table.lookup(namespace, pod)
        if now is None or now.uid != found.uid:
            return False
        current = now.containers.get(container)
        return current is not None and current.running and current.log_path == path

    return path, still_writing


async def _until_disconnect(reader: asyncio.StreamReader, work: Awaitable[None]) -> bool:
    """Run work; cancel it if the client closes the connection first (`logs -f`).

    True if the work completed, False if the client left.
    """
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_wait_eof(reader))
    try:
        await asyncio.wait([task, gone], return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        left = not task.done()
        if left:
            task.cancel()
    if left:
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False
    await task  # re-raise what the work raised
    return True


async def _wait_eof(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while await reader.read(4096):
            pass
