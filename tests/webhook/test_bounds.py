"""The relay's own limits, over real sockets: a connection that is idle, sends its headers
or body too slowly, or sends less body than it declared is answered or closed at its
deadline; connections and bytes received before the signature check are capped, in all
and per address, and what is over a cap gets 503 at once, never a hang. Idle
connections that claim megabytes they never send hold nothing: signed deliveries go
through while they stay."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress

import httpx
import pytest

from flows.webhook.app import RelaySettings
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import deliver, forgejo_headers, outcome_of, push_body
from tests.webhook.servers import PrefectServer, running_relay
from tests.webhook.specrepo import SpecRepo
from tests.webhook.test_relay import ALPHA_MANIFEST, pushed

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
        }
    )


@contextmanager
def connection(url: str, *, source: str = "127.0.0.1") -> Iterator[socket.socket]:
    """A connection to the relay from source (another loopback address: another peer)."""
    port = int(url.split(":")[2].split("/")[0])
    sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
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


def test_idle_connections_claiming_megabytes_do_not_starve_signed_deliveries(
    tight: RelaySettings, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    mib = 1024 * 1024
    attacked = tight.model_copy(
        update={
            "header_timeout_s": 60.0,
            "body_timeout_s": 60.0,
            "max_body_bytes": 5 * mib,
            "max_buffered_bytes": 20 * mib,
            "max_peer_buffered_bytes": 6 * mib,
            "max_connections": 32,
            "max_peer_connections": 4,
        }
    )
    with running_relay(attacked) as relay, ExitStack() as held:
        refused = 0
        for n in range(10):  # headers claiming 5 MiB each, then nothing, from two addresses
            sock = held.enter_context(connection(relay, source=f"127.0.0.{2 + n % 2}"))
            with suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(request_head(5 * mib))
            refused += _refused_at_once(sock)
        # and from a third address, bodies that stall after 4 MiB sent
        stalled = []
        for _ in range(2):
            sock = held.enter_context(connection(relay, source="127.0.0.4"))
            with suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(request_head(5 * mib) + b"x" * (4 * mib))
            stalled.append(sock)
        time.sleep(0.5)
        [over] = select.select(stalled, [], [], SLACK_S)[0]  # over its address's bytes
        answer, _ = read_until_closed(over, SLACK_S)
        assert answer.startswith(b"HTTP/1.1 503") and b"per address" in answer, answer[:300]
        assert refused == 2, f"{refused} of 10 idle connections refused; 2 beyond 4 per address"
        for n in range(3):  # the forge meanwhile
            payload = pushed(spec_repo, {ALPHA_MANIFEST: f"v: {n}\n"})
            started = time.monotonic()
            response = deliver(relay, payload, SECRET)
            assert response.status_code == 202, response.text
            assert time.monotonic() - started < 1.0
            assert outcome_of(relay, response)["outcome"] == "emitted"


def _refused_at_once(sock: socket.socket) -> int:
    """1 when the relay answered 503 and closed at once, 0 when it holds the connection."""
    if not select.select([sock], [], [], 0.2)[0]:
        return 0
    answer, _ = read_until_closed(sock, SLACK_S)
    assert answer.startswith(b"HTTP/1.1 503"), answer[:300]
    return 1
