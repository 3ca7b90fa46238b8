"""Streaming transports against a real loopback server that writes scripted bytes in separate
TCP segments: events split inside SSE lines, inside UTF-8 characters and inside chunk
framing still arrive whole and stamped by the read that completed them; keep-alive
connections are reused; an early close, an HTTP error and an oversized event become recorded
errors. The native transport and the httpx fallback must agree."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from gates.latency.load import RequestShape, Run, StreamPool, Transport, pick_transport
from tests.gates.servers import start_truth_server

CLOSE = b""  # a segment that closes the connection instead of writing
PAUSE_S = 0.03  # between segments: long enough for each to be its own read
TRANSPORTS: list[Transport] = ["native", "httpx"]


def sse_body(texts: list[str], *, done: bool = True) -> list[bytes]:
    """The SSE events of a completion with these token texts, usage and [DONE]."""
    events = [{"id": "cmpl-t", "choices": [{"index": 0, "text": text}]} for text in texts]
    events.append({"id": "cmpl-t", "choices": [], "usage": {"completion_tokens": len(texts)}})
    payloads = [b"data: " + json.dumps(e, ensure_ascii=False).encode() + b"\n\n" for e in events]
    return payloads + ([b"data: [DONE]\n\n"] if done else [])


def chunked(status: int, parts: list[bytes], *, headers: str = "") -> bytes:
    head = (
        f"HTTP/1.1 {status} X\r\ncontent-type: text/event-stream\r\n"
        f"transfer-encoding: chunked\r\n{headers}\r\n"
    ).encode()
    return head + b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def split_at(raw: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted(cuts), len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(edges) if b > a]


@dataclass
class ScriptedServer:
    """Answers the n-th request with the n-th script: byte segments written PAUSE_S apart
    (CLOSE closes the connection). Records each segment's send time (monotonic ns)."""

    scripts: Iterator[list[bytes]]
    sock: socket.socket = field(default_factory=socket.socket)
    connections: int = 0
    sent_ns: list[list[int]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def start(self) -> ScriptedServer:
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn, contextlib.suppress(OSError):  # a client that gave up hangs up first
            self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                data = conn.recv(65536)
                if not data:
                    return
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(buffer) < length:
                buffer += conn.recv(65536)
            buffer = buffer[length:]
            stamps: list[int] = []
            self.sent_ns.append(stamps)
            for segment in next(self.scripts):
                if segment is CLOSE:
                    return
                time.sleep(PAUSE_S)
                stamps.append(time.monotonic_ns())
                conn.sendall(segment)

    def stop(self) -> None:
        self.sock.close()


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(*scripts: list[bytes]) -> ScriptedServer:
        servers.append(ScriptedServer(iter(scripts)).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def load(url: str, transport: Transport, *, n_requests: int, max_tokens: int) -> Run:
    async def go() -> Run:
        pool = StreamPool(url, concurrency=1, read_timeout_s=5, transport=transport)
        async with pool:
            shape = RequestShape(model="m", max_tokens=max_tokens)
            return await pool.run(shape, ["p"], n_requests=n_requests)

    return asyncio.run(go())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_events_split_inside_sse_lines_and_utf8_are_stamped_when_complete(
    scripted: Callable[..., ScriptedServer], transport: Transport
) -> None:
    texts = ["é€", "ü", "ß"]
    raw = chunked(200, sse_body(texts))
    # cut inside each multi-byte character's bytes and inside the "data:" of the next event
    cuts = [raw.index(t.encode()) + 1 for t in texts] + [raw.index(b"data:") + 3]
    segments = split_at(raw, cuts)
    server = scripted(segments)
    (record,) = load(server.url, transport, n_requests=1, max_tokens=3).records
    assert record.ok, record.error
    assert record.n_out == 3 and record.n_out_source == "usage"
    sent = server.sent_ns[0]
    for k, text in enumerate(texts):  # token k is stamped no earlier than its last byte left
        last_byte = raw.index(text.encode()) + len(text.encode())
        completing = next(i for i, end in enumerate(_ends(segments)) if end >= last_byte)
        assert record.token_times_ns[k] >= sent[completing]


def _ends(segments: list[bytes]) -> list[int]:
    ends, total = [], 0
    for segment in segments:
        total += len(segment)
        ends.append(total)
    return ends


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_chunk_framing_split_into_tiny_reads(
    scripted: Callable[..., ScriptedServer], transport: Transport
) -> None:
    raw = chunked(200, [b": keep-alive\r\n\r\n", *sse_body(["a", "b"])])
    server = scripted([*split_at(raw, list(range(5, len(raw), 5)))[:40], raw[200:]])
    (record,) = load(server.url, transport, n_requests=1, max_tokens=2).records
    assert record.ok, record.error
    assert len(record.token_times_ns) == 2
    assert record.n_comments == 1


def test_native_transport_reuses_a_kept_alive_connection(
    scripted: Callable[..., ScriptedServer],
) -> None:
    whole = chunked(200, sse_body(["a", "b"]))
    closing = chunked(200, sse_body(["a", "b"]), headers="connection: close\r\n")
    server = scripted([whole], [whole], [closing], [whole])
    run = load(server.url, "native", n_requests=4, max_tokens=2)
    assert [r.error for r in run.records] == [None] * 4
    assert server.connections == 2  # one for the first three, a new one after "close"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_early_close_is_a_recorded_error(
    scripted: Callable[..., ScriptedServer], transport: Transport
) -> None:
    raw = chunked(200, sse_body(["a", "b", "c"]))
    cut = raw.index(b'"c"')  # two token events, then the server goes away mid-event
    server = scripted([raw[:cut], CLOSE])
    (record,) = load(server.url, transport, n_requests=1, max_tokens=3).records
    assert not record.ok
    assert "after 2 token events" in (record.error or "")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_http_error_is_recorded_and_the_connection_still_serves(
    scripted: Callable[..., ScriptedServer], transport: Transport
) -> None:
    body = b'{"error": {"message": "overloaded"}}'
    error = b"HTTP/1.1 503 X\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
    server = scripted([error], [chunked(200, sse_body(["a", "b"]))])
    first, second = load(server.url, transport, n_requests=2, max_tokens=2).records
    assert first.status == 503
    assert first.error is not None
    assert first.error.startswith("HTTP 503 from /v1/completions") and "overloaded" in first.error
    assert second.ok, second.error
    assert server.connections == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_oversized_event_is_a_recorded_error(
    scripted: Callable[..., ScriptedServer], transport: Transport
) -> None:
    huge = b"data: " + b"x" * (1 << 19)
    raw = chunked(200, [sse_body(["a"])[0], huge, huge, huge])
    server = scripted([raw])
    (record,) = load(server.url, transport, n_requests=1, max_tokens=1).records
    assert "grew past" in (record.error or "")
    assert "after 1 token events" in (record.error or "")


def test_tls_and_proxies_go_over_httpx() -> None:
    assert pick_transport("http://127.0.0.1:1", "native", None) == "native"
    assert pick_transport("https://127.0.0.1:1", "native", None) == "httpx"
    assert pick_transport("http://127.0.0.1:1", "native", "http://127.0.0.1:3128") == "httpx"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_against_the_truth_server_every_token_is_stamped_after_it_was_sent(
    tmp_path: Path, transport: Transport
) -> None:
    server = start_truth_server(workdir=tmp_path, interval_ms=5)
    try:

        async def go() -> Run:
            pool = StreamPool(server.url, concurrency=4, read_timeout_s=5, transport=transport)
            async with pool:
                shape = RequestShape(model="truth", max_tokens=8)
                return await pool.run(shape, ["p"], n_requests=8)

        run = asyncio.run(go())
        truth = httpx.get(f"{server.url}/truth", timeout=10).text.splitlines()
    finally:
        server.stop()
    sent = {t["id"]: t for t in map(json.loads, truth)}
    assert len(sent) == len(run.records) == 8
    for record in run.records:
        assert record.ok, record.error
        server_side = sent[record.response_id or ""]
        assert len(server_side["token_times_ns"]) == len(record.token_times_ns) == 8
        assert record.t_send_ns is not None and record.t_send_ns <= server_side["t_recv_ns"]
        for arrived, left in zip(record.token_times_ns, server_side["token_times_ns"], strict=True):
            assert arrived >= left  # one clock (CLOCK_MONOTONIC) on both sides


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_refused_connection_is_a_recorded_error(transport: Transport) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    (record,) = load(url, transport, n_requests=1, max_tokens=1).records
    assert record.status is None
    assert "ConnectError after 0 token events" in (record.error or "")
