"""The kubelet's HTTPS API answered on its own (no apiserver): a CA-signed client
certificate is required; containerLogs and portForward answer with the 1.20 kubelet's
status codes and texts; a WebSocket port-forward announces each port on both of its
channels, reaches the container's 127.0.0.1 ports with every byte intact both ways,
reports an unreachable port on the error channel, and closes once the container side
has closed."""

from __future__ import annotations

import ssl
import struct
import threading
import time

import httpx
import pytest
import websocket

from tests.kubelet_server.conftest import CONTAINER_PORT, ECHO_PORT, NAMESPACE, PAGE, POD, Kubelet


def _get(kubelet: Kubelet, path: str) -> httpx.Response:
    with httpx.Client(verify=kubelet.client_tls(), timeout=10) as client:
        return client.get(f"https://{kubelet.base}{path}")


def test_client_certificate_is_required(kubelet: Kubelet) -> None:
    anonymous = ssl.create_default_context(cafile=kubelet.pki.ca_crt)
    with pytest.raises(httpx.TransportError), httpx.Client(verify=anonymous, timeout=5) as c:
        c.get(f"https://{kubelet.base}/healthz")
    assert _get(kubelet, "/healthz").text == "ok"


@pytest.mark.parametrize(
    ("path", "status", "text"),
    [
        ("/containerLogs/ns1/nope/web", 404, 'pod "nope" does not exist'),
        (
            "/containerLogs/ns1/web/web?previous=true",
            400,
            'previous terminated container "web" in pod "web" not found',
        ),
        (
            "/containerLogs/ns1/web/sidecar",
            400,
            'container "sidecar" in pod "web" is waiting to start - no logs yet',
        ),
        ("/containerLogs/ns1/web/web?tailLines=-1", 422, '{"message": "Invalid request."}'),
        ("/portForward/ns1/nope", 404, "pod does not exist"),
        ("/portForward/ns1/web/other-uid", 404, "pod not found"),
        ("/portForward/ns1/web", 400, "unable to upgrade: X-Stream-Protocol-Version is required"),
        ("/metrics/cadvisor", 404, "404 page not found\n"),
    ],
)
def test_refusals(kubelet: Kubelet, path: str, status: int, text: str) -> None:
    response = _get(kubelet, path)
    assert (response.status_code, response.text) == (status, text)


def test_logs_tail_and_limit(kubelet: Kubelet) -> None:
    assert _get(kubelet, "/containerLogs/ns1/web/web").text == "line 1\nline 2\nline 3\n"
    assert _get(kubelet, "/containerLogs/ns1/web/web?tailLines=1").text == "line 3\n"
    assert _get(kubelet, "/containerLogs/ns1/web/web?limitBytes=8").text == "line 1\nl"


def test_follow_streams_until_the_container_stops(kubelet: Kubelet) -> None:
    received: list[bytes] = []
    done = threading.Event()

    def follow() -> None:
        with (
            httpx.Client(verify=kubelet.client_tls(), timeout=20) as client,
            client.stream(
                "GET", f"https://{kubelet.base}/containerLogs/ns1/web/web?follow=true"
            ) as response,
        ):
            for chunk in response.iter_bytes():
                received.append(chunk)
        done.set()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    _until(lambda: b"".join(received) == b"line 1\nline 2\nline 3\n", "the existing lines")
    with kubelet.log.open("ab") as f:
        f.write(b"line 4\n")
    _until(lambda: b"".join(received).endswith(b"line 4\n"), "the appended line")
    assert not done.is_set()
    kubelet.put(running=False)
    assert done.wait(10), "follow did not end after the container stopped"


def _until(check, what: str, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _connect(kubelet: Kubelet, query: str, protocols: list[str]) -> websocket.WebSocket:
    sslopt = {
        "ca_certs": str(kubelet.pki.ca_crt),
        "certfile": str(kubelet.pki.kubelet_client_crt),
        "keyfile": str(kubelet.pki.kubelet_client_key),
    }
    url = f"wss://{kubelet.base}/portForward/{NAMESPACE}/{POD}?{query}"
    return websocket.create_connection(url, sslopt=sslopt, subprotocols=protocols, timeout=10)


def _frames(ws: websocket.WebSocket) -> list[tuple[int, bytes]]:
    """Every (channel, data) message until the server closes."""
    frames = []
    while True:
        opcode, data = ws.recv_data()
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            return frames
        frames.append((data[0], data[1:]))


def test_websocket_forward_reaches_the_container(kubelet: Kubelet) -> None:
    ws = _connect(kubelet, f"port={CONTAINER_PORT}", ["v5.channel.k8s.io", "v4.channel.k8s.io"])
    assert ws.subprotocol == "v4.channel.k8s.io"  # v5 is newer than the 1.20 kubelet
    announce = struct.pack("<H", CONTAINER_PORT)
    assert [ws.recv_data()[1] for _ in range(2)] == [b"\0" + announce, b"\1" + announce]
    ws.send_binary(b"\0GET /hello.txt HTTP/1.0\r\n\r\n")
    frames = _frames(ws)  # HTTP/1.0: the server closes after answering; so does the forward
    body = b"".join(data for channel, data in frames if channel == 0)
    assert body.startswith(b"HTTP/1.0 200") and body.endswith(PAGE)
    assert not [data for channel, data in frames if channel == 1]


def test_websocket_forward_carries_large_payloads_both_ways(kubelet: Kubelet) -> None:
    ws = _connect(kubelet, f"port={CONTAINER_PORT},{ECHO_PORT}", ["v4.channel.k8s.io"])
    assert sorted(ws.recv_data()[1][0] for _ in range(4)) == [0, 1, 2, 3]
    payload = bytes(range(256)) * 8192  # 2 MiB, sent in 64 KiB messages on channel 2
    for offset in range(0, len(payload), 65536):
        ws.send_binary(b"\2" + payload[offset : offset + 65536])
    echoed = b""
    while len(echoed) < len(payload):
        _, data = ws.recv_data()
        assert data[0] == 2, f"unexpected message on channel {data[0]}: {data[1:200]!r}"
        echoed += data[1:]
    assert echoed == payload
    ws.close()


def test_websocket_unserved_port_is_reported_on_the_error_channel(kubelet: Kubelet) -> None:
    ws = _connect(kubelet, "port=9999", ["v4.channel.k8s.io"])
    frames = _frames(ws)
    errors = b"".join(data for channel, data in frames[2:] if channel == 1).decode()
    assert errors == (
        "error forwarding port 9999 to pod ns1/web, uid uid-1: "
        "no running container of pod ns1/web serves port 9999"
    )


@pytest.mark.parametrize(
    ("query", "protocols", "status"),
    [("", ["v4.channel.k8s.io"], 400), ("port=8080", ["SPDY/3.1+portforward.k8s.io"], 403)],
)
def test_websocket_refusals(
    kubelet: Kubelet, query: str, protocols: list[str], status: int
) -> None:
    with pytest.raises(websocket.WebSocketBadStatusException) as caught:
        _connect(kubelet, query, protocols)
    assert caught.value.status_code == status
