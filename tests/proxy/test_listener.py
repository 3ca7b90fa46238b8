"""A Service port's listener reaches endpoints through the kubelet's pod-ports.json (never
the pod IP). By default, as kube-proxy's iptables mode: each new connection goes to one
endpoint chosen at random, and a refusing endpoint (or one without a local port) resets
the client's connection, so clients fail at about that endpoint's share. The userspace
mode (`retry_next_endpoint`) goes round robin and skips endpoints it cannot reach. Both
reset connections when no endpoint is left, and leave a connection on its endpoint when
the endpoint list changes under it."""

from __future__ import annotations

import asyncio
import random
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


async def _try_get(address: str) -> str | None:
    """The name served, or None when the connection was reset or closed without an answer."""
    try:
        return await _get(address)
    except (ConnectionError, IndexError):
        return None


async def _listener(
    pod_ports: Path, *backends: Backend, retry_next_endpoint: bool = False, seed: int = 7
) -> ServiceListener:
    listener = ServiceListener(
        "ns",
        "svc",
        ServicePort(name="http", port=80),
        PodPorts(pod_ports),
        retry_next_endpoint=retry_next_endpoint,
        rng=random.Random(seed),
    )
    await listener.start()
    listener.backends = list(backends)
    return listener


CONNECTIONS = 40


@pytest.mark.parametrize("refusing", [GONE, UNKNOWN], ids=["port-closed", "no-local-port"])
def test_a_refusing_endpoint_fails_its_share_of_new_connections(
    pod_ports: Path, refusing: Backend
) -> None:
    async def scenario(retry_next_endpoint: bool) -> list[str | None]:
        listener = await _listener(pod_ports, A, refusing, retry_next_endpoint=retry_next_endpoint)
        try:
            return [await _try_get(listener.address) for _ in range(CONNECTIONS)]
        finally:
            await listener.abort()

    strict = asyncio.run(scenario(retry_next_endpoint=False))
    failed = strict.count(None)
    # Half the connections go to the refusing endpoint (binomial 40, 1/2: 20 +- 3.2);
    # each of those is the client's failure, none is moved to the endpoint that serves.
    assert 8 <= failed <= 32, strict
    assert set(strict) == {"a", None}
    # The userspace mode hid it: every connection ended at the endpoint that serves.
    assert asyncio.run(scenario(retry_next_endpoint=True)) == ["a"] * CONNECTIONS


def test_iptables_mode_spreads_connections_at_random(pod_ports: Path) -> None:
    async def scenario() -> list[str | None]:
        listener = await _listener(pod_ports, A, B)
        try:
            return [await _try_get(listener.address) for _ in range(CONNECTIONS)]
        finally:
            await listener.abort()

    served = asyncio.run(scenario())
    assert None not in served and 8 <= served.count("a") <= 32, served


def test_userspace_mode_round_robin_skips_unreachable_endpoints(pod_ports: Path) -> None:
    async def scenario() -> list[str]:
        listener = await _listener(pod_ports, A, GONE, B, UNKNOWN, retry_next_endpoint=True)
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
            listener.backends = [GONE]  # new connections now go where none can connect ...
            assert await _try_get(listener.address) is None
            listener.backends = []  # ... then find no endpoint ...
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
