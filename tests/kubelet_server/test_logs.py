"""Reading a container log: tail counts lines from the end (a final line without newline
counts), limitBytes cuts mid-line, CRI-format files answer timestamps and since*, plain
files refuse them, and a followed log ends only after the writer stopped and the file
was drained."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
from pathlib import Path

import pytest

from sandbox.kubelet.streaming.logopts import LogOptions
from sandbox.kubelet.streaming.logs import LogsUnavailable, stream_log, tail_offset


@pytest.mark.parametrize(
    ("content", "lines", "expected"),
    [
        (b"a\nb\nc\n", 0, b""),
        (b"a\nb\nc\n", 1, b"c\n"),
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc\n", 3, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 10, b"a\nb\nc\n"),
        (b"a\nb\nc", 1, b"c"),
        (b"a\nb\nc", 2, b"b\nc"),
        (b"", 2, b""),
        (b"x" * 20000 + b"\n" + b"y" * 9000 + b"\n", 1, b"y" * 9000 + b"\n"),
    ],
)
def test_tail_offset(content: bytes, lines: int, expected: bytes) -> None:
    f = io.BytesIO(content)
    assert content[tail_offset(f, lines) :] == expected


def _read(path: Path, opts: LogOptions, still_writing=lambda: False) -> bytes:  # type: ignore[no-untyped-def]
    chunks: list[bytes] = []

    async def out(data: bytes) -> None:
        chunks.append(data)

    asyncio.run(stream_log(path, opts, still_writing=still_writing, out=out))
    return b"".join(chunks)


def test_plain_tail_and_limit(tmp_path: Path) -> None:
    log = tmp_path / "plain.log"
    log.write_bytes(b"one\ntwo\nthree\n")
    assert _read(log, LogOptions()) == b"one\ntwo\nthree\n"
    assert _read(log, LogOptions(tail_lines=2)) == b"two\nthree\n"
    assert _read(log, LogOptions(limit_bytes=6)) == b"one\ntw"


def test_plain_file_refuses_timestamps(tmp_path: Path) -> None:
    log = tmp_path / "plain.log"
    log.write_bytes(b"one\n")
    with pytest.raises(LogsUnavailable, match="without per-line times"):
        _read(log, LogOptions(timestamps=True))


def test_cri_file_timestamps_and_since(tmp_path: Path) -> None:
    log = tmp_path / "cri.log"
    log.write_bytes(
        b"2026-11-29T10:00:00.000000001Z stdout F early\n"
        b"2026-11-29T11:00:00.000000002Z stderr P par\n"
        b"2026-11-29T11:00:00.000000003Z stderr F tial\n"
    )
    assert _read(log, LogOptions()) == b"early\npartial\n"
    since = dt.datetime(2026, 11, 29, 10, 30, tzinfo=dt.UTC)
    assert _read(log, LogOptions(since=since, timestamps=True)) == (
        b"2026-11-29T11:00:00.000000002Z par2026-11-29T11:00:00.000000003Z tial\n"
    )


def test_follow_drains_after_the_writer_stops(tmp_path: Path) -> None:
    log = tmp_path / "follow.log"
    log.write_bytes(b"first\n")
    polls = 0

    def still_writing() -> bool:
        nonlocal polls
        polls += 1
        if polls == 2:
            with log.open("ab") as f:
                f.write(b"second\n")
        if polls == 3:  # written just before the process exits: must still be read
            with log.open("ab") as f:
                f.write(b"last words\n")
            return False
        return True

    assert _read(log, LogOptions(follow=True), still_writing) == b"first\nsecond\nlast words\n"
