"""Closed-loop load: a fixed number of streams, each sending its next request when the last ends.

A `StreamPool` holds one single-connection client per stream, so connections stay warm across
the warm-up and the measured rounds of a comparison.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from gates.client import CHAT_PATH, COMPLETIONS_PATH, make_stream_client, stream_request
from gates.records import RequestRecord

Api = Literal["completions", "chat"]


@dataclass(frozen=True)
class RequestShape:
    """What every request of a load run asks for: same for baseline and candidate."""

    model: str
    max_tokens: int
    api: Api = "completions"
    seed: int = 0

    @property
    def path(self) -> str:
        return COMPLETIONS_PATH if self.api == "completions" else CHAT_PATH

    def body(self, prompt: str) -> dict[str, Any]:
        """Greedy, fixed-length streaming request with usage reported at the end."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "seed": self.seed,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body


@dataclass(frozen=True)
class Run:
    """The records of one closed-loop run and its span (first send to last end)."""

    records: list[RequestRecord]
    t_start_ns: int
    t_end_ns: int

    @property
    def duration_s(self) -> float:
        return (self.t_end_ns - self.t_start_ns) / 1e9


class StreamPool:
    """`concurrency` streams against one server, each with its own connection."""

    def __init__(self, base_url: str, *, concurrency: int, read_timeout_s: float) -> None:
        self.base_url = base_url
        self.concurrency = concurrency
        self._read_timeout_s = read_timeout_s
        self._stack = AsyncExitStack()
        self._clients: list[httpx.AsyncClient] = []

    async def __aenter__(self) -> StreamPool:
        for _ in range(self.concurrency):
            client = make_stream_client(self.base_url, read_timeout_s=self._read_timeout_s)
            self._clients.append(await self._stack.enter_async_context(client))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stack.aclose()

    async def run(
        self,
        shape: RequestShape,
        prompts: Sequence[str],
        *,
        n_requests: int,
        label: str = "",
        round_index: int = 0,
    ) -> Run:
        """Send `n_requests` requests, prompts cycled in order, `concurrency` at a time."""
        queue = iter(range(n_requests))
        records: list[RequestRecord] = []
        t_start_ns = time.perf_counter_ns()

        async def worker(client: httpx.AsyncClient) -> None:
            for index in queue:  # shared iterator: each index is taken exactly once
                record = RequestRecord(
                    index=index, label=label, round=round_index, expected_tokens=shape.max_tokens
                )
                body = shape.body(prompts[index % len(prompts)])
                records.append(
                    await stream_request(
                        client, shape.path, body, record, stall_timeout_s=self._read_timeout_s
                    )
                )

        await asyncio.gather(*(worker(client) for client in self._clients))
        sent = [r.t_send_ns for r in records if r.t_send_ns is not None]
        t_end_ns = max((r.t_end_ns or 0 for r in records), default=time.perf_counter_ns())
        return Run(sorted(records, key=lambda r: r.index), min(sent, default=t_start_ns), t_end_ns)
