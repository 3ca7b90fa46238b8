"""Incremental HTTP/1.1 response framing for the streaming transport: bytes in, body out.

Reads one response at a time: status line and headers, then a body framed by chunked
transfer encoding, by Content-Length, or by the connection closing. It hands back body bytes
as they arrive so a stream's events can be stamped by the read that carried them. Anything
it cannot frame raises `HttpProtocolError`; the connection is then unusable.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024
MAX_SIZE_LINE = 1024  # a chunk-size line with extensions; longer is not HTTP
HEAD_END = b"\r\n\r\n"

_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class HttpProtocolError(ValueError):
    """The bytes are not an HTTP/1.1 response this client can frame."""


@dataclass(frozen=True)
class ResponseHead:
    status: int
    version: str
    headers: dict[str, str]  # lower-cased names; a repeated header keeps its last value


class ResponseParser:
    """One response; `feed` returns the body bytes the data completes, `done` says when the
    body has ended, `keep_alive` whether the connection can carry another request."""

    __slots__ = ("_left", "_pending", "_state", "head")

    def __init__(self) -> None:
        self.head: ResponseHead | None = None
        self._state = _HEAD
        self._left = 0  # bytes left in the current chunk or Content-Length body
        self._pending = b""  # an incomplete head, size line or chunk terminator

    @property
    def done(self) -> bool:
        return self._state == _DONE

    @property
    def keep_alive(self) -> bool:
        if self.head is None or self._state != _DONE:
            return False
        connection = self.head.headers.get("connection", "").lower()
        if self.head.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"

    def feed(self, data: bytes) -> bytes:
        if self._pending:
            data, self._pending = self._pending + data, b""
        if self._state == _HEAD:
            data = self._take_head(data)
            if not data:
                return b""
        state = self._state
        if state == _DATA and len(data) < self._left:  # fast path: inside a chunk
            self._left -= len(data)
            return data
        if state == _LENGTH:
            return self._take_length(data)
        if state == _UNTIL_CLOSE:
            return data
        if state == _DONE:
            raise HttpProtocolError(f"{len(data)} bytes after the end of the response")
        return self._take_chunked(data)

    def end_of_input(self) -> None:
        """The connection closed: complete a close-delimited body, or fail."""
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
        elif self._state != _DONE:
            where = "before the response head" if self.head is None else "inside the body"
            raise HttpProtocolError(f"the server closed the connection {where}")

    def _take_head(self, data: bytes) -> bytes:
        end = data.find(HEAD_END)
        if end < 0:
            if len(data) > MAX_HEAD_BYTES:
                raise HttpProtocolError(f"response head longer than {MAX_HEAD_BYTES} bytes")
            self._pending = data
            return b""
        self.head = parse_head(data[:end])
        headers = self.head.headers
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _SIZE
        elif "content-length" in headers:
            raw = headers["content-length"]
            if not raw.isdigit():
                raise HttpProtocolError(f"Content-Length {raw!r} is not a number")
            self._left = int(raw)
            self._state = _LENGTH if self._left else _DONE
        elif self.head.status in (204, 304) or 100 <= self.head.status < 200:
            self._state = _DONE
        else:
            self._state = _UNTIL_CLOSE
        return data[end + len(HEAD_END) :]

    def _take_length(self, data: bytes) -> bytes:
        if len(data) > self._left:
            raise HttpProtocolError(f"{len(data) - self._left} bytes past Content-Length")
        self._left -= len(data)
        if not self._left:
            self._state = _DONE
        return data

    def _take_chunked(self, data: bytes) -> bytes:
        out: list[bytes] = []
        pos, size = 0, len(data)
        while pos < size:
            state = self._state
            if state == _DATA:
                take = min(self._left, size - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = _DATA_END
            elif state in (_SIZE, _TRAILER):
                end = data.find(b"\r\n", pos)
                if end < 0:
                    self._keep(data[pos:])
                    break
                line, pos = data[pos:end], end + 2
                if state == _TRAILER:
                    self._state = _TRAILER if line else _DONE
                else:
                    self._start_chunk(line)
            elif state == _DATA_END:
                if size - pos < 2:
                    self._keep(data[pos:])
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise HttpProtocolError(f"chunk not followed by CRLF: {data[pos : pos + 8]!r}")
                pos += 2
                self._state = _SIZE
            else:  # _DONE with bytes left over
                raise HttpProtocolError(f"{size - pos} bytes after the last chunk")
        return out[0] if len(out) == 1 else b"".join(out)

    def _start_chunk(self, line: bytes) -> None:
        try:
            length = int(line.split(b";", 1)[0], 16)
        except ValueError:
            raise HttpProtocolError(f"bad chunk-size line {line[:40]!r}") from None
        if length < 0:
            raise HttpProtocolError(f"bad chunk-size line {line[:40]!r}")
        self._left = length
        self._state = _DATA if length else _TRAILER

    def _keep(self, rest: bytes) -> None:
        if len(rest) > MAX_SIZE_LINE:
            raise HttpProtocolError(f"chunk framing line longer than {MAX_SIZE_LINE} bytes")
        self._pending = rest


def parse_head(raw: bytes) -> ResponseHead:
    """Status line and header lines (everything before the blank line)."""
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise HttpProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpProtocolError(f"malformed header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return ResponseHead(int(code), version, headers)
