"""A lean load driver for the model server: many concurrent streaming requests.

Each stream is one raw HTTP/1.1 connection read with asyncio streams (chunked SSE). A general
HTTP client costs several times the CPU per token, which on two shared cores delays the
server being measured. Used by the tests and the step-time benchmark; the latency gate has
its own measuring client.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


@dataclass
class StreamResult:
    status: int = 0
    id: str = ""
    text: str = ""
    token_events: int = 0
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    done: bool = False  # saw `data: [DONE]`
    comments: int = 0  # `:` lines such as keep-alives
    chunks: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


OnEvent = Callable[[StreamResult], None]


async def stream(
    base_url: str, path: str, body: dict[str, Any], *, on_event: OnEvent | None = None
) -> StreamResult:
    """One streamed request; `on_event` sees the result so far after every SSE event."""
    url = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        payload = json.dumps(body | {"stream": True}).encode()
        head = f"POST {path} HTTP/1.1\r\nhost: {url.netloc}\r\ncontent-type: application/json\r\n"
        head += f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n"
        writer.write(head.encode() + payload)
        return await _read_response(reader, on_event)
    finally:
        writer.close()


async def _read_response(reader: asyncio.StreamReader, on_event: OnEvent | None) -> StreamResult:
    result = StreamResult()
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    result.status = int(head.split(" ", 2)[1])
    if result.status != 200:
        result.error = (await reader.read()).decode(errors="replace")
        return result
    pending = b""
    while size := int((await reader.readline()).strip() or b"0", 16):
        pending += (await reader.readexactly(size + 2))[:-2]
        *events, pending = pending.split(b"\n\n")
        for event in events:
            _consume(result, event.decode())
            if on_event is not None:
                on_event(result)
    return result


def _consume(result: StreamResult, event: str) -> None:
    if event.startswith(":"):
        result.comments += 1
        return
    data = event.removeprefix("data: ")
    if data == "[DONE]":
        result.done = True
        return
    chunk = json.loads(data)
    result.chunks.append(chunk)
    result.id = chunk["id"]
    result.usage = chunk.get("usage") or result.usage
    for choice in chunk["choices"]:
        text = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
        result.text += text
        result.token_events += bool(text)
        result.finish_reason = choice.get("finish_reason") or result.finish_reason


async def run_streams(
    base_url: str,
    bodies: list[dict[str, Any]],
    *,
    path: str = "/v1/completions",
    on_event: OnEvent | None = None,
) -> list[StreamResult]:
    """Open one stream per body at once and wait for all of them."""
    streams = (stream(base_url, path, body, on_event=on_event) for body in bodies)
    return list(await asyncio.gather(*streams))


def load_body(
    *, max_tokens: int, prompt: str = "The quick brown fox jumps over the lazy dog. "
) -> dict[str, Any]:
    """A fixed-length greedy request, as latency tools send them."""
    return {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
