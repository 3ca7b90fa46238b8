"""The relay's own limits, over real sockets: a connection that is idle, sends its headers
or body too slowly, or sends less body than it declared is answered or closed at its
deadline; connections, bytes held before the signature check and deliveries in flight
are capped, and what is over a cap gets 503 (the forge retries) at once, never a hang."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from flows.webhook.app import RelaySettings
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import deliver, forgejo_headers, pull_request_body, push_body
from tests.webhook.servers import running_relay
from tests.webhook.test_relay import ALPHA_MANIFEST
from tests.webhook.upstream import front
from tests.world import wait_until

TIMEOUT_S = 1.5
SLACK_S = 5.0  # a loaded 2-core machine


@pytest.fixture
def tight(settings: RelaySettings) -> RelaySettings:
    return settings.model_copy(
        update={
            "header_timeout_s": TIMEOUT_S,
            "body_timeout_s": TIMEOUT_S,
            "keep_alive_s": TIMEOUT_S,
            "max_connections": 8,
            "max_buffered_bytes": 3 * settings.max_body_bytes,
            "max_deliveries": 2,
            "git_timeout_s": 8.0,
            "clone_hosts": frozenset({"127.0.0.1"}),
        }
    )


@contextmanager
def connection(url: str) -> Iterator[socket.socket]:
    port = int(url.split(":")[2].split("/")[0])
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        yield sock
    finally:
        sock.close()


def read_until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """Everything the relay sends until it closes the connection, and how long that took."""
    started, data = time.monotonic(), b""
    sock.settimeout(limit_s)
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        raise AssertionError(f"still open after {limit_s} s; got {data[:200]!r}") from None
    except ConnectionResetError:
        pass
    return data, time.monotonic() - started


def request_head(body_length: int, body_for_signature: bytes = b"{}") -> bytes:
    headers = forgejo_headers(body_for_signature, SECRET)
    lines = [f"{k}: {v}" for k, v in headers.items()]
    return (
        "POST /hooks/git HTTP/1.1\r\nHost: relay\r\n"
        + "".join(line + "\r\n" for line in lines)
        + f"Content-Length: {body_length}\r\n\r\n"
    ).encode()


def test_idle_and_slow_header_connections_are_closed_at_the_deadline(
    tight: RelaySettings,
) -> None:
    with running_relay(tight) as relay:
        with connection(relay) as idle:
            _, took = read_until_closed(idle, TIMEOUT_S + SLACK_S)
        assert took >= TIMEOUT_S * 0.8
        with connection(relay) as slow:
            head = request_head(2)
            stop = time.monotonic() + TIMEOUT_S + SLACK_S
            try:
                for byte in head:
                    slow.sendall(bytes([byte]))
                    time.sleep(0.2)
                    assert time.monotonic() < stop, "slow headers were never cut off"
            except (BrokenPipeError, ConnectionResetError):
                pass
            read_until_closed(slow, SLACK_S)


@pytest.mark.parametrize("sent", ["short", "slow"])
def test_a_body_not_received_in_time_is_408_and_closed(tight: RelaySettings, sent: str) -> None:
    body = json.dumps(push_body([ALPHA_MANIFEST])).encode()
    with running_relay(tight) as relay, connection(relay) as sock:
        sock.sendall(request_head(len(body), body) + body[:10])
        if sent == "slow":  # a byte every 0.1 s until the relay answers
            stop = time.monotonic() + TIMEOUT_S + SLACK_S
            for byte in body[10:]:
                if select.select([sock], [], [], 0.1)[0] or time.monotonic() > stop:
                    break
                sock.sendall(bytes([byte]))
        answer, _ = read_until_closed(sock, TIMEOUT_S + SLACK_S)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]


def test_an_idle_keep_alive_connection_is_closed(tight: RelaySettings) -> None:
    with running_relay(tight) as relay, httpx.Client() as client:
        assert client.get(relay.replace("/hooks/git", "/healthz")).status_code == 200
        with connection(relay) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
            answer, took = read_until_closed(sock, TIMEOUT_S + SLACK_S)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert took >= TIMEOUT_S * 0.8


def test_connections_over_the_cap_get_503_at_once(tight: RelaySettings) -> None:
    # idle connections must stay held until the extra one arrives, however slowly this runs
    patient = tight.model_copy(update={"header_timeout_s": 60.0})
    with running_relay(patient) as relay, ExitStack() as held:
        for _ in range(tight.max_connections):
            held.enter_context(connection(relay))
        time.sleep(0.2)
        with connection(relay) as extra:
            answer, took = read_until_closed(extra, SLACK_S)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert took < SLACK_S
        held.close()
        time.sleep(0.2)
        assert httpx.get(relay.replace("/hooks/git", "/healthz")).status_code == 200


def test_bytes_held_before_the_signature_check_are_capped(tight: RelaySettings) -> None:
    """Uploads that stall short of their end hold what they sent; past the cap in all,
    the next upload is refused with 503 instead of buffered."""
    size = tight.max_body_bytes - 1024
    with running_relay(tight) as relay, ExitStack() as held:
        socks = [held.enter_context(connection(relay)) for _ in range(4)]
        for sock in socks[:3]:
            sock.sendall(request_head(size) + b"x" * (size - 10))
        time.sleep(0.3)
        socks[3].sendall(request_head(size) + b"x" * (size - 10))
        answer, _ = read_until_closed(socks[3], SLACK_S)
    assert answer.startswith(b"HTTP/1.1 503"), answer[:300]
    assert b"buffered" in answer


def test_deliveries_over_the_cap_get_503_while_the_upstream_hangs(
    tight: RelaySettings,
) -> None:
    # the hung clones must hold both delivery slots until the third delivery is answered
    patient = tight.model_copy(update={"git_timeout_s": 60.0})
    threads = []
    with running_relay(patient) as relay:
        with front() as hung:
            for n in range(tight.max_deliveries):  # a mirror each: neither waits for the other
                url = f"git://127.0.0.1:{hung.port}/models-{n}.git"
                body = pull_request_body(f"{n}" * 40, clone_url=url)
                thread = threading.Thread(
                    target=deliver,
                    args=(relay, body, SECRET),
                    kwargs={"headers": {"X-Forgejo-Event": "pull_request"}},
                    daemon=True,
                )
                thread.start()
                threads.append(thread)
            wait_until(
                lambda: hung.accepted >= tight.max_deliveries,
                timeout_s=30,
                what=f"{tight.max_deliveries} clones to reach the upstream",
                every_s=0.05,
            )
            started = time.monotonic()
            normal = deliver(relay, push_body([ALPHA_MANIFEST]), SECRET)
            took = time.monotonic() - started
        for thread in threads:  # the upstream gone, the hung clones fail and their slots free
            thread.join(timeout=30)
    assert normal.status_code == 503, normal.text
    assert normal.json()["outcome"] == "busy", normal.text
    assert normal.headers["retry-after"] == "5"
    assert took < SLACK_S
