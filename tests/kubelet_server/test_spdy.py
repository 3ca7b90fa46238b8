"""SPDY/3 framing matches what Go's spdystream puts on the wire: the header-compression
dictionary is the protocol's (its Adler-32 is the DICTID peers put in their zlib
header), and header blocks decode across frames with one shared zlib context."""

from __future__ import annotations

import asyncio
import struct
import zlib

from sandbox.kubelet.streaming import spdy

# Adler-32 of the SPDY/3 dictionary, the DICTID in every SPDY/3 peer's zlib stream header.
SPDY3_DICTIONARY_ADLER32 = 0xE3C6A7C2


def test_dictionary_is_spdy3() -> None:
    assert len(spdy.DICTIONARY) == 1423
    assert zlib.adler32(spdy.DICTIONARY) == SPDY3_DICTIONARY_ADLER32


def _syn_stream(compressor: zlib._Compress, stream_id: int, headers: dict[str, str]) -> bytes:
    block = struct.pack(">I", len(headers))
    for name, value in headers.items():
        for text in (name, value):
            block += struct.pack(">I", len(text)) + text.encode()
    compressed = compressor.compress(block) + compressor.flush(zlib.Z_SYNC_FLUSH)
    payload = struct.pack(">IIBB", stream_id, 0, 0, 0) + compressed
    return struct.pack(">HHI", 0x8003, spdy.SYN_STREAM, len(payload)) + payload


def _read_all(wire: bytes) -> list[spdy.Frame]:
    async def read() -> list[spdy.Frame]:
        reader = asyncio.StreamReader()
        reader.feed_data(wire)
        reader.feed_eof()
        codec, frames = spdy.SpdyCodec(), []
        while (frame := await codec.read(reader)) is not None:
            frames.append(frame)
        return frames

    return asyncio.run(read())


def test_header_blocks_share_one_context() -> None:
    client = zlib.compressobj(9, zdict=spdy.DICTIONARY)
    wire = b"".join(
        _syn_stream(client, sid, {"streamtype": kind, "port": "8080", "requestid": "0"})
        for sid, kind in ((1, "error"), (3, "data"))
    ) + spdy.data_frame(3, b"hello", fin=True)
    error, data, payload = _read_all(wire)
    assert (error.stream_id, error.header("streamType")) == (1, "error")
    assert error.header("port") == "8080"
    assert (data.stream_id, data.header("streamType")) == (3, "data")
    assert (payload.kind, payload.data, payload.fin) == (0, b"hello", True)


def test_syn_reply_decodes_on_the_other_side() -> None:
    server = spdy.SpdyCodec()
    wire = server.syn_reply(1) + server.syn_reply(3, {"x-answer": "42"})
    first, second = _read_all(wire)
    assert (first.kind, first.stream_id, first.headers) == (spdy.SYN_REPLY, 1, {})
    assert second.headers == {"x-answer": ["42"]}
