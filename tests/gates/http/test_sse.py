"""SSE framing yields exactly the `data` payloads of complete events, in order, however the
bytes are split across network reads (including inside a multi-byte UTF-8 character)."""

from __future__ import annotations

import pytest

from gates.http.sse import SseDecoder

STREAM_CASES = [
    # (name, raw stream, expected data payloads, expected comment count)
    ("one event", b'data: {"a":1}\n\n', [b'{"a":1}'], 0),
    ("crlf", b"data: x\r\n\r\ndata: y\r\n\r\n", [b"x", b"y"], 0),
    ("no space after colon", b"data:x\n\n", [b"x"], 0),
    ("multi-line data", b"data: a\ndata: b\n\n", [b"a\nb"], 0),
    ("keep-alive comment", b": keep-alive-text\n\ndata: x\n\n", [b"x"], 1),
    ("done", b"data: x\n\ndata: [DONE]\n\n", [b"x", b"[DONE]"], 0),
    ("other fields ignored", b"event: message\nid: 7\ndata: x\n\n", [b"x"], 0),
    ("blank lines alone", b"\n\n\n", [], 0),
    ("utf-8", 'data: "héllo €"\n\n'.encode(), ['"héllo €"'.encode()], 0),
]


@pytest.mark.parametrize(("name", "raw", "expected", "comments"), STREAM_CASES)
@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 1000])
def test_events_do_not_depend_on_read_boundaries(
    name: str, raw: bytes, expected: list[bytes], comments: int, chunk_size: int
) -> None:
    decoder = SseDecoder()
    events = []
    for start in range(0, len(raw), chunk_size):
        events += decoder.feed(raw[start : start + chunk_size])
    events += decoder.close()
    assert events == expected, name
    assert decoder.comments == comments


def test_event_is_released_only_when_its_blank_line_arrives() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: x\n") == []
    assert decoder.feed(b"\n") == [b"x"]


def test_unterminated_last_event_is_flushed_at_close() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: tail") == []
    assert decoder.close() == [b"tail"]
