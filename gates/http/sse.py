"""Server-sent-events framing: bytes in, `data:` payloads out (as bytes).

The only module that knows SSE. It works on bytes and splits lines on LF (a CR before it is
dropped), so a multi-byte UTF-8 character split across network reads is whole again by the
time its line is complete; payloads stay bytes (JSON parsing decodes them later, off the path
that stamps arrivals). It joins multi-line `data:` fields and drops `:` comments such as
candle-vllm's `: keep-alive-text`. An event that grows past `max_event_bytes` without its blank
line is an error: a broken or hostile server must not fill memory. Interpreting payloads
(token events, usage, `[DONE]`) is `gates.http.events`' job.
"""

from __future__ import annotations

DEFAULT_MAX_EVENT_BYTES = 1 << 20


class SseError(ValueError):
    """The stream is not SSE this client accepts (an event over the size limit)."""


class SseDecoder:
    """Incremental SSE decoder; feed it the response body in order."""

    __slots__ = ("_data", "_data_bytes", "_tail", "comments", "max_event_bytes")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._tail = b""  # an unterminated line
        self._data: list[bytes] = []  # `data:` lines of the event being built
        self._data_bytes = 0
        self.comments = 0
        self.max_event_bytes = max_event_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        """Return the `data` of every event completed by this chunk, in order."""
        if not self._tail and not self._data and chunk.startswith(b"data: "):
            # Fast path: one whole single-line event per read, as servers write them.
            end = chunk.find(b"\n")
            if end + 2 == len(chunk) and chunk[-1] == 10 and chunk[end - 1] != 13:
                return [chunk[6:end]]
        text = self._tail + chunk if self._tail else chunk
        lines = text.split(b"\n")
        self._tail = lines.pop()  # the unterminated tail waits for more bytes
        events: list[bytes] = []
        for line in lines:
            event = self._take_line(line[:-1] if line.endswith(b"\r") else line)
            if event is not None:
                events.append(event)
        if len(self._tail) + self._data_bytes > self.max_event_bytes:
            raise self._oversized()
        return events

    def close(self) -> list[bytes]:
        """Flush an event left unterminated when the stream ended."""
        tail, self._tail = self._tail, b""
        lines = [tail.removesuffix(b"\r"), b""] if tail else [b""]
        return [event for line in lines if (event := self._take_line(line)) is not None]

    def _take_line(self, line: bytes) -> bytes | None:
        if not line:  # a blank line dispatches the event
            if not self._data:
                return None
            data = b"\n".join(self._data)
            self._data, self._data_bytes = [], 0
            return data
        if line[0] == 58:  # b":"
            self.comments += 1
            return None
        name, _, value = line.partition(b":")
        if name == b"data":
            value = value[1:] if value.startswith(b" ") else value
            self._data.append(value)
            self._data_bytes += len(value) + 1
            if self._data_bytes > self.max_event_bytes:
                raise self._oversized()
        return None  # `event:`, `id:`, `retry:` carry nothing the gates use

    def _oversized(self) -> SseError:
        return SseError(
            f"an SSE event grew past {self.max_event_bytes} bytes without its closing blank "
            "line: the server does not send server-sent events this client accepts"
        )
