"""Server-sent-events framing: bytes in, `data:` payloads out.

The only module that knows SSE. It decodes UTF-8 incrementally (a multi-byte character may
be split across network reads), splits lines on LF or CRLF, joins multi-line `data:` fields
and drops `:` comments such as candle-vllm's `: keep-alive-text`. Interpreting the payloads
(token events, usage, `[DONE]`) is `gates.events`' job.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field


@dataclass
class SseDecoder:
    """Incremental SSE decoder; feed it network reads in order."""

    _utf8: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )
    _line_buffer: str = ""
    _data_lines: list[str] = field(default_factory=list)
    comments: int = 0

    def feed(self, chunk: bytes) -> list[str]:
        """Return the `data` of every event completed by this chunk, in order."""
        text = self._line_buffer + self._utf8.decode(chunk)
        lines = text.split("\n")
        self._line_buffer = lines.pop()  # the unterminated tail waits for more bytes
        events: list[str] = []
        for line in lines:
            event = self._take_line(line.removesuffix("\r"))
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[str]:
        """Flush an event left unterminated when the stream ended."""
        tail = self._line_buffer + self._utf8.decode(b"", final=True)
        self._line_buffer = ""
        lines = [tail.removesuffix("\r"), ""] if tail else [""]
        return [event for line in lines if (event := self._take_line(line)) is not None]

    def _take_line(self, line: str) -> str | None:
        if not line:  # a blank line dispatches the event
            if not self._data_lines:
                return None
            data = "\n".join(self._data_lines)
            self._data_lines = []
            return data
        if line.startswith(":"):
            self.comments += 1
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data_lines.append(value.removeprefix(" "))
        return None  # `event:`, `id:`, `retry:` carry nothing the gates use
