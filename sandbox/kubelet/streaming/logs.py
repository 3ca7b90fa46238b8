"""Reading a container's log file for `kubectl logs`: tail, byte limit, follow.

Two formats. CRI lines (`<RFC3339Nano> <stdout|stderr> <P|F> <text>`, what container
runtimes write) carry a time per line, so `timestamps`, `sinceSeconds` and `sinceTime`
work. Plain output (the process's stdout+stderr as written) has no per-line time, so
those options are refused with a 400 that says why instead of answered with made-up
times. Following polls the file (as the kubelet's 1 s forced re-check does, only more
often) and ends once the container has stopped and the file is drained.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import BinaryIO

from sandbox.kubelet.streaming.logopts import LogOptions

FOLLOW_POLL_S = 0.1
_READ_BYTES = 64 * 1024
_CRI_LINE = re.compile(rb"(\S+) (?:stdout|stderr) ([PF]) (.*)", re.S)


class LogsUnavailable(ValueError):
    """The request cannot be answered from this file; the kubelet answers 400."""


def _cri_time(stamp: bytes) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(stamp.decode().replace("Z", "+00:00"))
    except ValueError:
        return None


def _parse_cri(raw: bytes) -> tuple[bytes, dt.datetime, bytes, bytes] | None:
    """(timestamp as written, its time, tag P/F, text) of a CRI log line, or None."""
    match = _CRI_LINE.fullmatch(raw.rstrip(b"\n"))
    time = _cri_time(match.group(1)) if match else None
    if match is None or time is None:
        return None
    return match.group(1), time, match.group(2), match.group(3)


def tail_offset(f: BinaryIO, lines: int) -> int:
    """Where the last `lines` lines of f start (a final line without newline counts)."""
    end = f.seek(0, 2)
    if lines == 0:
        return end
    position, block = end, b""
    while position > 0:
        step = min(8192, position)
        position -= step
        f.seek(position)
        block = f.read(step) + block
        # The newline that ends the file closes the last line; it does not start one.
        body = block[:-1] if block.endswith(b"\n") else block
        if body.count(b"\n") >= lines:
            index = len(body)
            for _ in range(lines):
                index = body.rfind(b"\n", 0, index)
            return position + index + 1
    return 0


class _Writer:
    """Formats lines and enforces limitBytes (cut mid-line, as the kubelet does)."""

    def __init__(self, opts: LogOptions, cri: bool, out: Callable[[bytes], Awaitable[None]]):
        self._opts, self._cri, self._out = opts, cri, out
        self._budget = opts.limit_bytes

    @property
    def exhausted(self) -> bool:
        return self._budget is not None and self._budget <= 0

    async def line(self, raw: bytes) -> None:
        if self.exhausted:
            return
        if self._cri:
            parsed = _parse_cri(raw)
            if parsed is None:
                return  # the kubelet skips lines it cannot parse
            stamp, time, tag, text = parsed
            if self._opts.since is not None and time < self._opts.since:
                return
            raw = text + (b"\n" if tag == b"F" else b"")
            raw = stamp + b" " + raw if self._opts.timestamps else raw
        if self._budget is not None:
            raw, self._budget = raw[: self._budget], self._budget - len(raw)
        await self._out(raw)


def _first_line_is_cri(f: BinaryIO) -> bool:
    first = f.readline()
    f.seek(0)
    return _parse_cri(first) is not None


async def stream_log(
    path: Path,
    opts: LogOptions,
    *,
    still_writing: Callable[[], bool],
    out: Callable[[bytes], Awaitable[None]],
) -> None:
    """Write the selected part of the log to out; with follow, until the writer stops."""
    with open(path, "rb") as f:
        cri = _first_line_is_cri(f)
        if not cri and (opts.timestamps or opts.since is not None):
            raise LogsUnavailable(
                f"log file {path} holds plain container output without per-line times: "
                "timestamps, sinceSeconds and sinceTime are not available; retry without them"
            )
        if opts.tail_lines is not None:
            f.seek(tail_offset(f, opts.tail_lines))
        await out(b"")  # headers now, as the kubelet's zero-byte write does
        writer, pending, draining = _Writer(opts, cri, out), b"", not opts.follow
        while not writer.exhausted:
            chunk = f.read(_READ_BYTES)
            if chunk:
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    await writer.line(line + b"\n")
            elif draining:
                break
            elif still_writing():
                await asyncio.sleep(FOLLOW_POLL_S)
            else:
                draining = True  # one more pass picks up what was written before the stop
        if pending and not writer.exhausted:
            await writer.line(pending)
