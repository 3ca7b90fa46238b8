"""Streaming OpenAI-compatible client: sends one request, stamps every token event.

Clock rules (notes/gates.md): `t_send` is stamped by httpcore's trace hook when the request
headers start onto the wire, so time queued inside the client is measured apart; each network
read is stamped with `perf_counter_ns` as it arrives, before any decoding or JSON parsing.
Each stream gets its own single-connection `httpx.AsyncClient`: one shared pool made 64
simultaneous streams wait ~0.6 s inside the pool on this kind of machine.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from gates.events import StreamEvent, parse_payload
from gates.records import RequestRecord
from gates.sse import SseDecoder

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"


def make_stream_client(base_url: str, *, read_timeout_s: float) -> httpx.AsyncClient:
    """A client owning exactly one keep-alive connection; ignores proxy environment variables."""
    return httpx.AsyncClient(
        base_url=base_url,
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        timeout=httpx.Timeout(read_timeout_s, connect=10.0),
        trust_env=False,
    )


async def stream_request(
    client: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    record: RequestRecord,
    *,
    stall_timeout_s: float,
) -> RequestRecord:
    """Send `body`, fill `record` as the stream arrives; errors are recorded, never raised.

    A stream with no token event for `stall_timeout_s` fails, even if the server keeps the
    connection alive with SSE comments (candle-vllm sends one every 100 ms).
    """

    async def trace(name: str, info: dict[str, Any]) -> None:
        if name.endswith("send_request_headers.started"):
            record.t_send_ns = time.perf_counter_ns()

    record.t_queued_ns = time.perf_counter_ns()
    try:
        async with client.stream("POST", path, json=body, extensions={"trace": trace}) as resp:
            record.t_headers_ns = time.perf_counter_ns()
            record.status = resp.status_code
            if resp.status_code != 200:
                detail = (await resp.aread())[:300].decode(errors="replace")
                record.error = f"HTTP {resp.status_code} from {path}: {detail}"
            else:
                await _read_stream(resp, record, stall_timeout_s)
    except TimeoutError:
        record.error = (
            f"stalled after {len(record.token_times_ns)} token events: no token event "
            f"for {stall_timeout_s:g} s"
        )
    except httpx.HTTPError as exc:
        events = len(record.token_times_ns)
        record.error = f"{type(exc).__name__} after {events} token events: {exc}"
    record.t_end_ns = time.perf_counter_ns()
    return record


async def _read_stream(response: httpx.Response, record: RequestRecord, stall_s: float) -> None:
    decoder = SseDecoder()
    done = False
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(stall_s) as stall:
        async for chunk in response.aiter_raw():
            arrived_ns = time.perf_counter_ns()  # stamp first: parsing must not delay the clock
            n_tokens = len(record.token_times_ns)
            for data in decoder.feed(chunk):
                done = _apply(parse_payload(data), arrived_ns, record) or done
            if len(record.token_times_ns) > n_tokens:  # progress: push the stall deadline
                stall.reschedule(loop.time() + stall_s)
    for data in decoder.close():
        done = _apply(parse_payload(data), time.perf_counter_ns(), record) or done
    record.n_comments = decoder.comments
    if record.error is None:
        record.error = check_complete(record, done=done)


def _apply(event: StreamEvent, arrived_ns: int, record: RequestRecord) -> bool:
    if event.is_token:
        record.token_times_ns.append(arrived_ns)
    if event.completion_tokens is not None:
        record.n_out, record.n_out_source = event.completion_tokens, "usage"
    if event.prompt_tokens is not None:
        record.n_prompt = event.prompt_tokens
    record.response_id = record.response_id or event.response_id
    if event.error is not None and record.error is None:
        record.error = event.error
    return event.done


def check_complete(record: RequestRecord, *, done: bool) -> str | None:
    """Why a finished stream is not a complete answer, or None; also fills a missing N_out."""
    events = len(record.token_times_ns)
    if not done:
        return f"stream closed without [DONE] after {events} token events"
    if record.n_out is None:
        # Flagged fallback: one token per event is only a guess when usage is missing.
        record.n_out, record.n_out_source = events, "events"
    if record.expected_tokens is not None and record.n_out != record.expected_tokens:
        return (
            f"stream delivered {record.n_out} tokens, expected {record.expected_tokens} "
            "(ignore_eos was set): the server cut the answer short"
        )
    if events == 0:
        return "stream finished without a single token event"
    return None
