"""Just enough HTTP/1.1 for the kubelet's API.

One request per connection (every response says `Connection: close`), so there is no
keep-alive bookkeeping; upgraded requests hand the raw stream pair to a protocol handler.
Bodies are plain (Content-Length) or chunked for followed logs.
"""

from __future__ import annotations

import asyncio
import email.message
import http.client
import io
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import parse_qs, unquote, urlsplit

MAX_HEAD_BYTES = 64 * 1024


class BadRequest(ValueError):
    """The request head could not be parsed."""


@dataclass(frozen=True)
class Request:
    method: str
    segments: tuple[str, ...]  # unquoted path segments, empty ones dropped
    query: dict[str, list[str]]
    headers: email.message.Message

    def header(self, name: str) -> str:
        return str(self.headers.get(name, ""))

    def header_tokens(self, name: str) -> list[str]:
        """All comma-separated values of a header that may repeat, in order."""
        values = self.headers.get_all(name) or []
        tokens = (token.strip() for value in values for token in str(value).split(","))
        return [token for token in tokens if token]


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request head, or None when the peer closed before sending one."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError as exc:
        raise BadRequest(f"request head longer than {MAX_HEAD_BYTES} bytes") from exc
    line, _, rest = head.partition(b"\r\n")
    parts = line.decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"malformed request line {line[:100]!r}")
    url = urlsplit(parts[1])
    segments = tuple(unquote(s) for s in url.path.split("/") if s)
    headers = http.client.parse_headers(io.BytesIO(rest))
    return Request(parts[0], segments, parse_qs(url.query, keep_blank_values=True), headers)


def response_head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def send_text(
    writer: asyncio.StreamWriter, status: int, body: str, headers: dict[str, str] | None = None
) -> None:
    """A complete plain-text response, as Go's http.Error / restful's WriteError send it."""
    data = body.encode()
    head = {
        **(headers or {}),
        "Content-Type": "text/plain; charset=utf-8",
        "Content-Length": str(len(data)),
        "Connection": "close",
    }
    writer.write(response_head(status, head) + data)
    await writer.drain()


class ChunkedBody:
    """A 200 response whose body is written as it is produced (followed logs)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._started = False

    async def write(self, data: bytes) -> None:
        if not self._started:
            self._writer.write(
                response_head(
                    200,
                    {
                        "Content-Type": "text/plain",
                        "Transfer-Encoding": "chunked",
                        "Connection": "close",
                    },
                )
            )
            self._started = True
        if data:
            self._writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await self._writer.drain()

    async def end(self) -> None:
        await self.write(b"")
        self._writer.write(b"0\r\n\r\n")
        await self._writer.drain()
