"""The relay as a hostile forge and hostile clients would use it, all at once, against
`handoff webhook serve` as its own process with tight limits: random and structured
bodies (signed, so they reach the parser; unicode in refs and paths), header abuse
(wrong content types, duplicate signatures, huge headers), slow and idle clients, and
upstreams that accept and never answer. Whatever comes in: no 5xx but the documented
503, every answer within the deadlines, the relay's memory and disk bounded, no file
created by any payload, and a delivery whose upstream hung is processed by the relay's
own retries once it answers.

The seed is printed; HANDOFF_FUZZ_SEED replays a run.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from flows.webhook.events import read_merge_events, wait_persisted
from flows.webhook.signature import sign
from sandbox import procs
from tests.webhook.conftest import REPOSITORY, SECRET
from tests.webhook.payloads import final_record, forgejo_headers, pull_request_body, push_body
from tests.webhook.servers import PrefectServer, start_relay_process
from tests.webhook.specrepo import SpecRepo, git, merge_and_push
from tests.webhook.test_relay import ALPHA_MANIFEST, bare_remote
from tests.webhook.upstream import Front, front, git_daemon

TIMEOUT_S = 4.0  # body, keep-alive and git deadlines of the relay under test
# A client starved by the machine's load can take seconds between connecting and sending
# its headers; this deadline is for clients that never send them.
HEADER_TIMEOUT_S = 10.0
SLACK_S = 12.0  # a loaded 2-core machine (load average 25 seen)
ANSWER_WITHIN_S = TIMEOUT_S + 5.0 + SLACK_S  # git deadline + Prefect deadline + slack
MAX_BODY = 64 * 1024
BUFFERED = 4 * MAX_BODY
MAX_MIRROR_BYTES = 4 * 1024 * 1024
MAX_RECORDS = 50
ALLOWED = {200, 202, 400, 401, 404, 405, 408, 413, 503}
RSS_GROWTH_MIB = 40  # over the relay's own warm size: buffers are capped far below this
LIMITS = (
    *("--git-timeout", str(TIMEOUT_S), "--header-timeout", str(HEADER_TIMEOUT_S)),
    *("--body-timeout", str(TIMEOUT_S), "--keep-alive", str(TIMEOUT_S)),
    *("--max-body-bytes", str(MAX_BODY), "--max-buffered-bytes", str(BUFFERED)),
    *("--max-connections", "24", "--max-deliveries", "3", "--prefect-timeout", "5"),
    *("--max-records", str(MAX_RECORDS), "--max-mirrors", "2"),
    *("--max-mirror-bytes", str(MAX_MIRROR_BYTES), "--clone-host", "127.0.0.1"),
    *("--repository", REPOSITORY, "--max-backoff", "2"),
    # Every request comes from 127.0.0.1: the per-address share is the whole relay's here,
    # so each request meets the parser, not the per-address limit (tests/webhook/test_bounds.py).
    *("--max-peer-connections", "24", "--max-peer-buffered-bytes", str(BUFFERED)),
)
# the store holds at most MAX_RECORDS queued bodies besides the mirrors
MAX_STATE_BYTES = MAX_MIRROR_BYTES + MAX_RECORDS * MAX_BODY + 2 * 1024 * 1024


def hostile(canary: Path, port: int) -> list[str]:
    """Strings that would run a command or touch a file if they reached a shell or git."""
    return [
        f"--upload-pack=touch {canary}/a",
        f"-u touch {canary}/b",
        f"--config=core.sshCommand=touch {canary}/c",
        f"ext::sh -c touch% {canary}/d",
        f"ssh://-oProxyCommand=touch%20{canary}/e/x",
        f"file://{canary}/f",
        f"$(touch {canary}/g)",
        f"`touch {canary}/h`",
        f"; touch {canary}/i",
        f"main:refs/heads/x --upload-pack=touch {canary}/j",
        f"../../../../{canary}/k",
        f"http://127.0.0.1:{port}/x.git --upload-pack=touch {canary}/l",
        "\ud800",
        "é" * 300,
        "\x00\x01\x7f",
    ]


class Corpus:
    """Bodies and headers drawn from a seeded random source."""

    def __init__(self, rng: random.Random, canary: Path, hung: Front, merge: str) -> None:
        self.rng, self.hung, self.merge = rng, hung, merge
        self.strings = hostile(canary, hung.port)

    def value(self, depth: int = 0) -> Any:
        rng = self.rng
        kind = rng.randrange(9 if depth < 6 else 6)
        if kind == 0:
            return rng.choice(self.strings)
        if kind == 1:
            return "x" * rng.choice([0, 1, 255, 256, 301, 2049, 5000, 40_000])
        if kind == 2:
            return rng.choice([0, -1, 2**64, 1e308, True, None])
        if kind == 3:
            return "".join(chr(rng.randrange(1, 0x10FFFF)) for _ in range(rng.randrange(20)))
        if kind == 4:
            return rng.choice(["a" * 40, "0" * 40, "refs/heads/main", "main", "--all"])
        if kind == 5:
            return f"git://127.0.0.1:{self.hung.port}/m{rng.randrange(4)}.git"
        if kind == 6:
            return [self.value(depth + 1) for _ in range(rng.randrange(4))]
        if kind == 7:
            return {str(self.value(depth + 1))[:20]: self.value(depth + 1) for _ in range(3)}
        nest = rng.randrange(10, 5000)
        return json.loads("[" * nest + "]" * nest) if nest < 900 else "[" * nest

    def structured(self) -> tuple[str, dict[str, Any]]:
        """A push or merged pull request with one to three fields replaced."""
        rng = self.rng
        if rng.random() < 0.5:
            event, body = "push", push_body([ALPHA_MANIFEST], after=self.merge)
            fields = ["ref", "after", "before", "commits", "repository", "head_commit"]
            fields += ["repository.full_name", "repository.clone_url", "repository.default_branch"]
            fields += ["commits.0.id", "commits.0.modified", "commits.0.timestamp"]
        else:
            url = f"git://127.0.0.1:{self.hung.port}/models.git"
            event, body = "pull_request", pull_request_body(self.merge, clone_url=url)
            fields = ["action", "pull_request.merged", "pull_request.merge_commit_sha"]
            fields += ["pull_request.base", "pull_request.base.ref", "pull_request.merged_at"]
            fields += ["repository.clone_url", "repository.full_name", "repository"]
        for path in rng.sample(fields, rng.randrange(1, 4)):
            _set(body, path, self.value())
        return event, body

    def body(self) -> tuple[str, bytes]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.15:
            return rng.choice(["push", "pull_request"]), rng.randbytes(rng.randrange(1, 3000))
        if roll < 0.3:
            return "push", _dumps(self.value())
        event, body = self.structured()
        return event, _dumps(body)

    def headers(self, event: str, body: bytes) -> list[tuple[str, str | bytes]]:
        rng = self.rng
        headers: list[tuple[str, str | bytes]] = list(
            forgejo_headers(body, SECRET, event=event).items()
        )
        roll = rng.random()
        if roll < 0.08:  # a second, different signature
            headers.append(("X-Forgejo-Signature", sign(b"other", body)))
        elif roll < 0.14:
            headers = [(k, v) for k, v in headers if "Signature" not in k]
        elif roll < 0.2:
            headers.append(("X-Forgejo-Delivery", str(uuid.uuid4())))
        elif roll < 0.26:
            headers = [(k, v) for k, v in headers if k != "X-Forgejo-Delivery"]
            headers.append(("X-Forgejo-Delivery", rng.choice(["x" * 5000, "a b", "\xe9"])))
        elif roll < 0.3:
            headers.append(("X-Junk", "j" * rng.choice([100, 8000])))
        elif roll < 0.34:
            headers.append(("X-Forgejo-Event", rng.choice(["push", "issues", "x" * 200])))
        elif roll < 0.4:  # what the body claims to be: form data, text, nothing, twice JSON
            headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
            kinds = ["application/x-www-form-urlencoded", "text/plain; charset=utf-16", ""]
            kinds += ["multipart/form-data; boundary=x", "application/json, text/html"]
            headers.append(("Content-Type", rng.choice(kinds)))
        return [(k, v.encode("latin-1") if isinstance(v, str) else v) for k, v in headers]


def _set(body: dict[str, Any], path: str, value: Any) -> None:
    node: Any = body
    *parents, last = path.split(".")
    for key in parents:
        try:
            node = node[int(key)] if isinstance(node, list) else node[key]
        except (KeyError, IndexError, TypeError, ValueError):
            return
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list) and node:
        node[0] = value


def _dumps(value: Any) -> bytes:
    try:
        return json.dumps(value).encode()
    except (ValueError, RecursionError):
        return b"[" * 3000


class Watch:
    """Peak resident memory of a process, sampled every 50 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_kib, self._stop = pid, 0, threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            line = next(x for x in status if x.startswith("VmRSS:"))
        return int(line.split()[1])

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak_kib = max(self.peak_kib, self.rss_kib())
            except (OSError, StopIteration):
                return
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()


def post(url: str, body: bytes, headers: list[tuple[str, str | bytes]]) -> tuple[int, float]:
    """The status and seconds to it; 0 when the relay closed the connection first, which
    only a body over the cap may see (refused on its Content-Length, not read)."""
    started = time.monotonic()
    try:
        response = httpx.post(url, content=body, headers=headers, timeout=ANSWER_WITHIN_S + 5)
    except (httpx.RemoteProtocolError, httpx.WriteError, httpx.ReadError):
        assert len(body) > MAX_BODY, f"connection dropped on a {len(body)}-byte body: {headers}"
        return 0, time.monotonic() - started
    except httpx.TimeoutException:
        raise AssertionError(
            f"no answer within {ANSWER_WITHIN_S + 5} s to a {len(body)}-byte body "
            f"{body[:200]!r} with headers {headers}"
        ) from None
    return response.status_code, time.monotonic() - started


def closed_within(port: int, send: Callable[[socket.socket], None], limit_s: float) -> float:
    """Open a connection, run send on it, and return the seconds until the relay closes it."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=limit_s) as sock:
        try:
            send(sock)
            while sock.recv(65536):
                pass
        except (BrokenPipeError, ConnectionResetError):
            pass
        except TimeoutError:
            raise AssertionError(f"connection still open after {limit_s} s") from None
    return time.monotonic() - started


def slow_headers(sock: socket.socket) -> None:
    for byte in b"POST /hooks/git HTTP/1.1\r\nHost: relay\r\nX-Slow: " + b"s" * 200:
        sock.sendall(bytes([byte]))
        time.sleep(0.25)


def slow_body(sock: socket.socket) -> None:
    head = f"POST /hooks/git HTTP/1.1\r\nHost: r\r\nContent-Length: {MAX_BODY - 1}\r\n\r\n"
    sock.sendall(head.encode() + b"{" * 1000)
    for _ in range(200):
        sock.sendall(b" ")
        time.sleep(0.1)


def short_body(sock: socket.socket) -> None:
    sock.sendall(b"POST /hooks/git HTTP/1.1\r\nHost: r\r\nContent-Length: 50000\r\n\r\n{}")


def idle(sock: socket.socket) -> None:
    pass


RAW_REQUESTS = [
    b"GARBAGE\r\n\r\n",
    b"POST /hooks/git HTTP/1.1\r\nHost: r\r\nX-Big: " + b"b" * 20_000 + b"\r\n\r\n",
    b"POST /hooks/git HTTP/1.1\r\nHost: r\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n",
    b"POST /hooks/git HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n\r\nfffffffff\r\n",
    b"POST /hooks/git HTTP/1.1\r\nHost: r\r\nX-\xff\xfe: \xff\r\nContent-Length: 2\r\n\r\n{}",
    b"GET /../../etc/passwd HTTP/1.1\r\nHost: r\r\n\r\n",
    b"DELETE /hooks/git HTTP/1.1\r\nHost: r\r\nContent-Length: 0\r\n\r\n",
]


def raw_status(port: int, request: bytes) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN_S) as sock:
        try:
            sock.sendall(request)
            answer = sock.recv(200)
        except ConnectionResetError:
            return 0
    return int(answer.split(b" ")[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.mark.timeout(240)
def test_the_relay_under_fuzz(prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path) -> None:
    seed = int(os.environ.get("HANDOFF_FUZZ_SEED") or random.randrange(2**32))
    print(f"HANDOFF_FUZZ_SEED={seed}")
    rng = random.Random(seed)
    canary = tmp_path / "canary"
    canary.mkdir()
    bare = bare_remote(spec_repo)
    merge, _ = merge_and_push(spec_repo, {ALPHA_MANIFEST: "kind: Deployment\n"}, "alpha v2")
    state, log = tmp_path / "state", tmp_path / "relay.log"
    with front() as hung, git_daemon(bare.parent) as daemon:
        record, url = _start_relay(prefect, spec_repo, state, log)
        port = int(url.split(":")[2].split("/")[0])
        try:
            # the fuzz merges another commit: the retried one must be new to the relay
            corpus = Corpus(rng, canary, hung, "c0ffee" * 6 + "c0ff")
            requests = [corpus.body() for _ in range(160)]
            requests = [(event, body, corpus.headers(event, body)) for event, body in requests]
            for _ in range(3):  # warm: the first deliveries load what the relay imports
                post(url, *_signed_push(corpus))
            watch = Watch(record.pid)
            baseline_kib = watch.rss_kib()
            retry = _accepted_while_its_upstream_hangs(url, merge, hung)

            with ThreadPoolExecutor(max_workers=12) as pool:
                slow = [
                    pool.submit(closed_within, port, send, HEADER_TIMEOUT_S + SLACK_S + 25)
                    for send in [slow_headers, slow_body, short_body, idle] * 2
                ]
                answers = list(
                    pool.map(lambda r: (r[0], *post(url, r[1], r[2])), requests, chunksize=1)
                )
                raw = [pool.submit(raw_status, port, request) for request in RAW_REQUESTS]
                closed_after = [f.result() for f in slow]
                raw_statuses = [f.result() for f in raw]

            hung.forward_to(daemon)
            retried = final_record(url, retry, timeout_s=60)
            watch.stop()
            assert procs.is_alive(record), procs.log_tail(log)
        finally:
            procs.stop(record)

    statuses = sorted({status for _, status, _ in answers})
    print(
        f"statuses {statuses}; raw {raw_statuses}; peak RSS {watch.peak_kib} KiB "
        f"(warm {baseline_kib}); connections closed after {[round(s, 1) for s in closed_after]}"
    )
    assert set(statuses) <= ALLOWED | {0}, statuses
    assert set(raw_statuses) <= ALLOWED | {0}, raw_statuses
    assert raw_statuses[1] in {0, 400}, "headers over 16 KiB"
    assert max(took for _, _, took in answers) < ANSWER_WITHIN_S
    assert all(took < HEADER_TIMEOUT_S + SLACK_S for took in closed_after), closed_after
    assert watch.peak_kib - baseline_kib < RSS_GROWTH_MIB * 1024
    assert sorted(canary.rglob("*")) == [], "a payload created a file"
    assert disk_bytes(state) < MAX_STATE_BYTES
    assert retried["outcome"] == "emitted" and retried["handoffs"] == ["alpha"], retried
    wait_persisted(prefect.api_url)
    events = read_merge_events(
        prefect.api_url, namespace=spec_repo.namespace, service=spec_repo.services["alpha"]
    )
    assert [e.merge.kind for e in events if e.merge.merge_commit == merge] == ["pull_request"]
    lines = log.read_text(errors="replace").splitlines()
    assert max(map(len, lines), default=0) < 2000, "a log line repeats a payload in full"


def _start_relay(
    prefect: PrefectServer, spec_repo: SpecRepo, state: Path, log: Path
) -> tuple[procs.ProcessRecord, str]:
    """The relay under test, as its own process with the tight limits."""
    where = {"specs_dir": spec_repo.specs_dir, "state_dir": state, "log": log}
    return start_relay_process(api_url=prefect.api_url, secret=SECRET, options=LIMITS, **where)


def _signed_push(corpus: Corpus) -> tuple[bytes, list[tuple[str, str | bytes]]]:
    """A signed push (so the warm relay has stored one and its worker has taken it)."""
    after = corpus.rng.randbytes(20).hex()
    body = json.dumps(push_body(["manifests/golden/beta.json"], after=after)).encode()
    return body, list(forgejo_headers(body, SECRET).items())


def _accepted_while_its_upstream_hangs(url: str, merge: str, hung: Front) -> str:
    """A merged pull request whose upstream hangs: accepted at once; its delivery id."""
    body = json.dumps(
        pull_request_body(merge, clone_url=f"git://127.0.0.1:{hung.port}/models.git")
    ).encode()
    headers = forgejo_headers(body, SECRET, event="pull_request")
    started = time.monotonic()
    first = httpx.post(url, content=body, headers=headers, timeout=ANSWER_WITHIN_S + 5)
    assert first.status_code == 202, first.text
    assert time.monotonic() - started < 1.0
    return str(first.json()["delivery"])


def _flood_request(i: int) -> tuple[bytes, dict[str, str]]:
    """Every third: unsigned (401), signed junk (400), a signed push touching no spec."""
    if i % 3 == 0:
        body = b'{"ref": "refs/heads/main"}'
        return body, {**forgejo_headers(body, SECRET), "X-Forgejo-Signature": "0" * 64}
    if i % 3 == 1:
        body = b'{"ref": ' + str(i).encode()
        return body, forgejo_headers(body, SECRET)
    body = json.dumps(push_body(["README.md"], after=f"{i:040x}")).encode()
    return body, forgejo_headers(body, SECRET)


async def _flood(url: str, rate: int, seconds: float) -> tuple[list[int], float]:
    """One client offering `rate` requests a second for `seconds` over a few kept-alive
    connections; the statuses (0: connection closed or timed out) and the requests a
    second from the first sent to the last answered."""
    import asyncio

    statuses: list[int] = []
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    async with httpx.AsyncClient(limits=limits, timeout=ANSWER_WITHIN_S) as client:

        async def one(i: int) -> None:
            body, headers = _flood_request(i)
            try:
                statuses.append((await client.post(url, content=body, headers=headers)).status_code)
            except httpx.HTTPError:
                statuses.append(0)

        started, tasks = time.monotonic(), []
        for i in range(int(rate * seconds)):
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        return statuses, len(tasks) / (time.monotonic() - started)


def _relay_under_flood(
    prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path, rate: int, seconds: float
) -> None:
    import asyncio

    state, log = tmp_path / "state", tmp_path / "relay.log"
    bare = bare_remote(spec_repo)
    before = git(spec_repo.work, "rev-parse", "HEAD").strip()
    merge, _ = merge_and_push(spec_repo, {ALPHA_MANIFEST: "kind: Deployment\n"}, "alpha v2")
    record, url = _start_relay(prefect, spec_repo, state, log)
    try:
        for i in range(3):  # warm
            post(url, *_signed_push_of(i))
        watch = Watch(record.pid)
        baseline_kib = watch.rss_kib()
        statuses, reached = asyncio.run(_flood(url, rate, seconds))
        watch.stop()
        assert procs.is_alive(record), procs.log_tail(log)
        # correct answers after: a merge touching a spec still emits its event
        with git_daemon(bare.parent) as port:
            push = push_body([ALPHA_MANIFEST], after=merge, before=before)
            push["repository"]["clone_url"] = f"git://127.0.0.1:{port}/{bare.name}"
            body = json.dumps(push).encode()
            accepted = httpx.post(
                url, content=body, headers=forgejo_headers(body, SECRET), timeout=30
            )
            assert accepted.status_code in (202, 503), accepted.text
            while accepted.status_code == 503:  # the queue full of the flood's: as a forge
                time.sleep(0.5)
                accepted = httpx.post(
                    url, content=body, headers=forgejo_headers(body, SECRET), timeout=30
                )
            after = final_record(url, accepted.json()["delivery"], timeout_s=60)
    finally:
        procs.stop(record)
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    print(
        f"offered {rate}/s for {seconds} s, all answered at {reached:.0f}/s; statuses {counts}; "
        f"peak RSS {watch.peak_kib} KiB (warm {baseline_kib})"
    )
    assert set(counts) <= ALLOWED | {0}, counts
    assert counts.get(401, 0) > 0 and counts.get(400, 0) > 0 and counts.get(202, 0) > 0, counts
    assert watch.peak_kib - baseline_kib < RSS_GROWTH_MIB * 1024
    assert after["outcome"] == "emitted" and after["handoffs"] == ["alpha"], after
    assert disk_bytes(state) < MAX_STATE_BYTES


def _signed_push_of(i: int) -> tuple[bytes, list[tuple[str, str | bytes]]]:
    body = json.dumps(push_body(["manifests/golden/beta.json"], after=f"{i + 1:040x}")).encode()
    return body, list(forgejo_headers(body, SECRET).items())


@pytest.mark.timeout(180)
def test_the_relay_under_a_short_flood(
    prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path
) -> None:
    """The default suite's representative of the flood below: 200 requests a second, 2 s."""
    _relay_under_flood(prefect, spec_repo, tmp_path, rate=200, seconds=2.0)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_relay_under_a_flood_of_1000_requests_a_second(
    prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path
) -> None:
    _relay_under_flood(prefect, spec_repo, tmp_path, rate=1000, seconds=10.0)
