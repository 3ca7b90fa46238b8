"""Request heads are parsed strictly: a well-formed HTTP/1.1 head yields method, path and
headers; anything this server cannot frame is a BadRequest carrying the status to answer."""

from __future__ import annotations

import pytest

from sandbox.modelserver.httpd.wire import MAX_BODY_BYTES, BadRequest, chunk, parse_head


def test_a_request_head_parses_into_its_parts() -> None:
    head = parse_head(b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 12")
    assert (head.method, head.path, head.version) == ("POST", "/v1/completions", "HTTP/1.1")
    assert head.headers == {"host": "a", "content-length": "12"}
    assert head.content_length() == 12 and head.keep_alive


@pytest.mark.parametrize(
    ("raw", "keep_alive"),
    [
        (b"GET / HTTP/1.1", True),
        (b"GET / HTTP/1.1\r\nConnection: close", False),
        (b"GET / HTTP/1.0", False),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive", True),
    ],
)
def test_keep_alive_follows_the_version_and_connection_header(raw: bytes, keep_alive: bool) -> None:
    assert parse_head(raw).keep_alive is keep_alive


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GARBAGE", 400),
        (b"GET /", 400),
        (b"GET / SPDY/3", 400),
        (b"GET / HTTP/1.1\r\nno colon here", 400),
        (b"GET / HTTP/1.1\r\n bad: folded", 400),
    ],
)
def test_malformed_heads_are_bad_requests(raw: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_head(raw)
    assert caught.value.status == status


@pytest.mark.parametrize(
    ("header", "status"),
    [
        (b"Transfer-Encoding: chunked", 400),
        (b"Content-Length: ten", 400),
        (b"Content-Length: " + str(MAX_BODY_BYTES + 1).encode(), 413),
    ],
)
def test_unreadable_bodies_are_refused(header: bytes, status: int) -> None:
    head = parse_head(b"POST / HTTP/1.1\r\n" + header)
    with pytest.raises(BadRequest) as caught:
        head.content_length()
    assert caught.value.status == status


def test_chunks_carry_their_length_in_hex() -> None:
    assert chunk(b"data: x\n\n" * 2) == b"12\r\ndata: x\n\ndata: x\n\n\r\n"
