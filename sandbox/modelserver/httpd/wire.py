"""HTTP/1.1 framing: parsing a request head, writing response heads and chunks."""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 8 * 1024 * 1024
HEAD_END = b"\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class BadRequest(Exception):
    """The bytes are not an HTTP/1.1 request this server can read."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RequestHead:
    method: str
    target: str
    version: str
    headers: dict[str, str]  # lower-cased names; a repeated header keeps its last value

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"

    @property
    def expects_continue(self) -> bool:
        return self.headers.get("expect", "").lower() == "100-continue"

    def content_length(self) -> int:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            raise BadRequest("chunked request bodies are not supported: send Content-Length")
        raw = self.headers.get("content-length", "0")
        if not raw.isdigit():
            raise BadRequest(f"Content-Length {raw!r} is not a number")
        length = int(raw)
        if length > MAX_BODY_BYTES:
            raise BadRequest(f"body of {length} bytes exceeds {MAX_BODY_BYTES}", status=413)
        return length


def parse_head(raw: bytes) -> RequestHead:
    """Parse everything before the blank line (request line and header lines)."""
    try:
        lines = raw.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError as exc:
        raise BadRequest(f"malformed request line {raw[:80]!r}") from exc
    if not version.startswith("HTTP/1."):
        raise BadRequest(f"unsupported protocol {version!r}: expected HTTP/1.x")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(f"malformed header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    return RequestHead(method, target, version, headers)


def response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)
