"""SPDY/3.1 framing as docker/spdystream (the Kubernetes port-forward transport) uses it.

Frames: an 8-byte header (control bit, version 3, type, flags, 24-bit length). Header
blocks (`count, (len, name, len, value)*`, values joined by NUL) are zlib-compressed
with the SPDY/3 dictionary, one compression context per direction for the whole
connection, each block ending in a sync flush. spdystream does no flow control, so
WINDOW_UPDATE and SETTINGS are read and ignored.
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from dataclasses import dataclass

SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS = 1, 2, 3, 4, 6, 7, 8
FLAG_FIN = 0x01
RST_PROTOCOL_ERROR, RST_CANCEL = 1, 5
_VERSION = 3

_NAMES = (
    "options head post put delete trace accept accept-charset accept-encoding accept-language "
    "accept-ranges age allow authorization cache-control connection content-base "
    "content-encoding content-language content-length content-location content-md5 "
    "content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location "
    "max-forwards pragma proxy-authenticate proxy-authorization range referer retry-after "
    "server te trailer transfer-encoding upgrade user-agent vary via warning "
    "www-authenticate method get status 200_OK version HTTP/1.1 url public set-cookie "
    "keep-alive origin"
)
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)


def _dictionary() -> bytes:
    """The SPDY/3 header-compression dictionary: length-prefixed names, then a raw tail."""
    words = [w.replace("_", " ") for w in _NAMES.split(" ")]  # "200_OK" is the one with a space
    return b"".join(struct.pack(">I", len(w)) + w.encode() for w in words) + _TAIL.encode()


DICTIONARY = _dictionary()


class SpdyError(ValueError):
    """The peer sent something that is not SPDY/3 framing."""


@dataclass(frozen=True)
class Frame:
    kind: int  # 0 for DATA, else the control frame type
    stream_id: int  # stream id; PING id; GOAWAY last-good id; 0 when not applicable
    flags: int
    data: bytes = b""  # DATA payload
    headers: dict[str, list[str]] | None = None  # SYN_STREAM / SYN_REPLY / HEADERS
    status: int = 0  # RST_STREAM / GOAWAY status

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)

    def header(self, name: str) -> str:
        values = (self.headers or {}).get(name.lower(), [])
        return values[0] if values else ""


class SpdyCodec:
    """Reads and writes the frames of one connection (owns both zlib contexts)."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)
        self._deflate = zlib.compressobj(9, zdict=DICTIONARY)

    async def read(self, reader: asyncio.StreamReader) -> Frame | None:
        """The next frame, or None at a clean end of the connection."""
        try:
            first, second = struct.unpack(">II", await reader.readexactly(8))
        except asyncio.IncompleteReadError:
            return None
        flags, payload = second >> 24, await reader.readexactly(second & 0xFFFFFF)
        if not first & 0x80000000:
            return Frame(0, first & 0x7FFFFFFF, flags, data=payload)
        if (first >> 16) & 0x7FFF != _VERSION:
            raise SpdyError(f"SPDY version {(first >> 16) & 0x7FFF} frame; only 3 is spoken")
        return self._control(first & 0xFFFF, flags, payload)

    def _control(self, kind: int, flags: int, payload: bytes) -> Frame:
        if kind in (SYN_STREAM, SYN_REPLY, HEADERS):
            # Every header block must pass the inflater, or the shared context breaks.
            skip = 10 if kind == SYN_STREAM else 4
            stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            return Frame(kind, stream_id, flags, headers=self._decode(payload[skip:]))
        if kind in (RST_STREAM, GOAWAY):
            ident, status = struct.unpack_from(">II", payload)
            return Frame(kind, ident & 0x7FFFFFFF, flags, status=status)
        if kind == PING:
            return Frame(kind, struct.unpack_from(">I", payload)[0], flags)
        return Frame(kind, 0, flags)

    def _decode(self, block: bytes) -> dict[str, list[str]]:
        raw = self._inflate.decompress(block)
        headers: dict[str, list[str]] = {}
        (count,), offset = struct.unpack_from(">I", raw), 4
        for _ in range(count):
            fields = []
            for _ in range(2):
                (size,) = struct.unpack_from(">I", raw, offset)
                fields.append(raw[offset + 4 : offset + 4 + size].decode("latin-1"))
                offset += 4 + size
            headers.setdefault(fields[0].lower(), []).extend(fields[1].split("\0"))
        return headers

    def _encode(self, headers: dict[str, str]) -> bytes:
        block = struct.pack(">I", len(headers))
        for name, value in headers.items():
            for text in (name.lower(), value):
                block += struct.pack(">I", len(text)) + text.encode("latin-1")
        return self._deflate.compress(block) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    def syn_reply(self, stream_id: int, headers: dict[str, str] | None = None) -> bytes:
        return _control(SYN_REPLY, 0, struct.pack(">I", stream_id) + self._encode(headers or {}))


def _control(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | _VERSION, kind, flags << 24 | len(payload)) + payload


def data_frame(stream_id: int, data: bytes, *, fin: bool = False) -> bytes:
    flags = FLAG_FIN if fin else 0
    return struct.pack(">II", stream_id & 0x7FFFFFFF, flags << 24 | len(data)) + data


def rst_stream(stream_id: int, status: int) -> bytes:
    return _control(RST_STREAM, 0, struct.pack(">II", stream_id, status))


def ping(ident: int) -> bytes:
    return _control(PING, 0, struct.pack(">I", ident))


def goaway(last_good_stream_id: int) -> bytes:
    return _control(GOAWAY, 0, struct.pack(">II", last_good_stream_id, 0))
