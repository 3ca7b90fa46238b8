"""A Service port's listener sends each new connection to the next ready endpoint, round
robin, through the kubelet's pod-ports.json (never the pod IP); skips endpoints it cannot
reach; resets connections when no endpoint is left; and leaves a connection on its
endpoint when the endpoint list changes under it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from sandbox.kubelet.runtime import ContainerRuntime, PodTable, RunningPod
from sandbox.procs import free_port
from sandbox.proxy.backends import Backend, PodPorts, ServicePort
from sandbox.proxy.listener import ServiceListener
from tests.kubelet_server.webproc import http_process

A, B = Backend(ip="10.244.0.1", port=8080), Backend(ip="10.244.0.2", port=8080)
GONE = Backend(ip="10.244.0.3", port=8080)  # recorded, but its process has exited
UNKNOWN = Backend(ip="10.244.0.4", port=8080)  # not in pod-ports.json at all
HELD = Backend(ip="10.244.0.5", port=8080)


@pytest.fixture
def pod_ports(tmp_path: Path) -> Iterator[Path]:
    """Pods a and b each serve name.txt with their own name; pod c's port is dead."""
    table = PodTable(tmp_path / "pod-ports.json")
    with ExitStack() as stack:
        for backend, name in ((A, "a"), (B, "b")):
            site = tmp_path / name
            site.mkdir()
            (site / "name.txt").write_text(name)
            port = stack.enter_context(http_process(site, tmp_path / f"{name}.log"))
            _put(table, name, backend, port)
        _put(table, "c", GONE, free_port())
        yield tmp_path / "pod-ports.json"


def _put(table: PodTable, name: str, backend: Backend, local: int) -> None:
    container = ContainerRuntime(Path("/dev/null"), None, {8080: local}, running=True)
    table.put("ns", name, RunningPod(f"uid-{name}", backend.ip, "n1", {"server": container}))


async def _get(address: str, path: str = "/name.txt") -> str:
    host, port = address.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    response = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return response.split(b"\r\n\r\n", 1)[1].decode()


async def _listener(pod_ports: Path, *backends: Backend) -> ServiceListener:
    listener = ServiceListener("ns", "svc", ServicePort(name="http", port=80), PodPorts(pod_ports))
    await listener.start()
    listener.backends = list(backends)
    return listener


def test_round_robin_skips_unreachable_endpoints(pod_ports: Path) -> None:
    async def scenario() -> list[str]:
        listener = await _listener(pod_ports, A, GONE, B, UNKNOWN)
        try:
            return [await _get(listener.address) for _ in range(4)]
        finally:
            await listener.abort()

    # Connections 2 and 4 start at the unreachable ones and move on to the next endpoint.
    assert asyncio.run(scenario()) == ["a", "b", "b", "a"]


def test_no_endpoints_resets_the_connection(pod_ports: Path) -> None:
    async def scenario() -> None:
        listener = await _listener(pod_ports)
        try:
            with pytest.raises(ConnectionResetError):
                await _get(listener.address)
        finally:
            await listener.abort()

    asyncio.run(scenario())


def test_open_connection_keeps_its_endpoint(tmp_path: Path) -> None:
    async def scenario() -> bytes:
        accepted = asyncio.Event()

        async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set()  # the proxy has dialled this endpoint
            writer.write(await reader.readline())  # answer with what the client sends
            writer.close()

        server = await asyncio.start_server(held, "127.0.0.1", 0)
        held_port = server.sockets[0].getsockname()[1]
        _put(PodTable(tmp_path / "held-ports.json"), "held", HELD, held_port)
        listener = await _listener(tmp_path / "held-ports.json", HELD)
        host, port = listener.address.split(":")
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
            await asyncio.wait_for(accepted.wait(), 10)
            listener.backends = []  # new connections now find no endpoint ...
            with pytest.raises(ConnectionResetError):
                await _get(listener.address)
            writer.write(b"still here\n")  # ... while this one stays with its endpoint
            echoed = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return echoed
        finally:
            await listener.abort()
            server.close()

    assert asyncio.run(scenario()) == b"still here\n"
