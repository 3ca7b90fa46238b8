"""Through the service proxy the sandbox runs, with pods the real kubelet runs: a request
to a Service's proxy address reaches a Ready pod behind it; when the Service's selector
moves to another pod, new connections go there as soon as the proxy has seen the new
EndpointSlices, while a stream already open to the old pod keeps flowing to its end; a
Service without ready endpoints resets connections; a deleted Service's listener goes.
Like kube-proxy, it routes by EndpointSlices, not Endpoints: a Service without a
selector whose only route is an EndpointSlice written by another controller (a mesh,
say) reaches the pod that slice names. Like kube-proxy's iptables mode, a slice that
names an endpoint nobody can connect to fails about that endpoint's share of new client
connections: nothing retries them on the endpoint that serves."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from sandbox.proxy import ProxyAddress, read_addresses
from sandbox.state import SandboxState
from tests.endpoint_slices import create_slice
from tests.kubelet import objects
from tests.kubelet_server.cluster import (
    push_server_image,
    require_components,
    scratch_namespace,
    start_server_pods,
)

WAIT_S = 30.0
STREAM_TOKENS = 400  # long enough to still be streaming when the selector has moved
STREAM_WAIT_S = 120.0  # 400 tokens took 1.5-10 s on a shared 2-core machine


@pytest.fixture(scope="module")
def pods(sandbox: SandboxState, kube_api: client.ApiClient) -> Iterator[tuple[str, dict[str, str]]]:
    """A namespace with Ready model-server pods a and b: (namespace, {name: pod IP})."""
    require_components(sandbox, "kubelet", "service-proxy")
    core = client.CoreV1Api(kube_api)
    image = push_server_image(sandbox)
    with scratch_namespace(core, "proxy") as namespace:
        ready = start_server_pods(core, namespace, image, ["a", "b"])
        yield namespace, {name: pod.status.pod_ip for name, pod in ready.items()}


def _listener(run_dir: Path, namespace: str, service: str) -> ProxyAddress | None:
    found = [a for a in read_addresses(run_dir) if a.matches(namespace, service, 80)]
    return found[0] if found else None


def _wait_listener(run_dir: Path, namespace: str, service: str, backends: list[str]) -> str:
    """The proxy address once the proxy routes the Service port to exactly these backends."""
    deadline, seen = time.monotonic() + WAIT_S, None
    while time.monotonic() < deadline:
        seen = _listener(run_dir, namespace, service)
        if seen is not None and sorted(seen.backends) == sorted(backends):
            return seen.address
        time.sleep(0.05)
    raise AssertionError(f"proxy never routed {namespace}/{service} to {backends}; last: {seen}")


def _expose(
    sandbox: SandboxState,
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    app: str,
    backends: list[str],
) -> str:
    """Create Service name selecting app=<app>; its proxy address once it routes to backends."""
    core.create_namespaced_service(namespace, objects.service(name, {"app": app}))
    return _wait_listener(sandbox.run_dir, namespace, name, backends)


def _served_model(address: str) -> str:
    response = httpx.get(f"http://{address}/v1/models", timeout=10, trust_env=False)
    return response.json()["data"][0]["id"]


class _Stream(threading.Thread):
    """Reads one streamed completion, stamping each SSE event as it arrives."""

    def __init__(self, address: str, model: str) -> None:
        super().__init__(daemon=True)
        self.url, self.model = f"http://{address}/v1/completions", model
        self.events: list[tuple[float, dict[str, Any] | str]] = []
        self.first = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        body = {"model": self.model, "prompt": "count", "max_tokens": STREAM_TOKENS, "stream": True}
        try:
            with httpx.stream("POST", self.url, json=body, timeout=60, trust_env=False) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        payload = line.removeprefix("data: ")
                        event = payload if payload == "[DONE]" else json.loads(payload)
                        self.events.append((time.monotonic(), event))
                        self.first.set()
        except Exception as exc:  # reported by the test, with what had arrived
            self.error = exc
            self.first.set()


def test_selector_change_moves_new_connections_only(
    sandbox: SandboxState, kube_api: client.ApiClient, pods: tuple[str, dict[str, str]]
) -> None:
    namespace, ips = pods
    core = client.CoreV1Api(kube_api)
    address = _expose(sandbox, core, namespace, "svc", "a", [f"{ips['a']}:8080"])
    assert _served_model(address) == "a"
    stream = _Stream(address, "a")
    stream.start()
    assert stream.first.wait(WAIT_S) and stream.error is None, f"no stream: {stream.error!r}"
    core.patch_namespaced_service("svc", namespace, {"spec": {"selector": {"app": "b"}}})
    assert _wait_listener(sandbox.run_dir, namespace, "svc", [f"{ips['b']}:8080"]) == address
    switched = time.monotonic()
    assert _served_model(address) == "b"
    stream.join(STREAM_WAIT_S)
    assert not stream.is_alive(), f"the stream to pod a did not finish in {STREAM_WAIT_S} s"
    assert stream.error is None, f"the stream to pod a broke: {stream.error!r}"
    arrivals, events = zip(*stream.events, strict=True)
    assert events[-1] == "[DONE]"
    assert {e["model"] for e in events[:-1] if isinstance(e, dict)} == {"a"}
    # The old pod was still sending after the proxy had moved: the stream was not cut.
    assert max(arrivals[:-1]) > switched


def test_service_without_ready_endpoints_resets(
    sandbox: SandboxState, kube_api: client.ApiClient, pods: tuple[str, dict[str, str]]
) -> None:
    namespace, _ = pods
    core = client.CoreV1Api(kube_api)
    address = _expose(sandbox, core, namespace, "empty", "nobody", [])
    host, port = address.split(":")
    # The reset may already fail the connect (a loopback RST can beat connect's return).
    with (
        pytest.raises((ConnectionResetError, BrokenPipeError)),
        socket.create_connection((host, int(port)), timeout=10) as conn,
    ):
        conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.recv(1024)
    # 1.20 answers a Service delete with a Status, which client 37 would parse as a V1Service.
    core.delete_namespaced_service("empty", namespace, _preload_content=False)
    deadline = time.monotonic() + WAIT_S
    while _listener(sandbox.run_dir, namespace, "empty") is not None:
        assert time.monotonic() < deadline, "listener of the deleted Service still listed"
        time.sleep(0.05)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=10)


def test_routes_follow_endpoint_slices_not_endpoints(
    sandbox: SandboxState, kube_api: client.ApiClient, pods: tuple[str, dict[str, str]]
) -> None:
    namespace, ips = pods
    core = client.CoreV1Api(kube_api)
    ports = [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}]
    core.create_namespaced_service(
        namespace, {"metadata": {"name": "sliced"}, "spec": {"ports": ports}}
    )
    create_slice(
        kube_api,
        namespace,
        name="sliced-mesh",
        service="sliced",
        endpoints=[{"addresses": [ips["a"]], "conditions": {"ready": True}}],
        port_names=("http",),
    )
    with pytest.raises(client.exceptions.ApiException) as absent:
        core.read_namespaced_endpoints("sliced", namespace)
    assert absent.value.status == 404  # nothing routes this Service but the slice
    address = _wait_listener(sandbox.run_dir, namespace, "sliced", [f"{ips['a']}:8080"])
    assert _served_model(address) == "a"


CONNECTIONS = 40


def test_an_unreachable_endpoint_fails_its_share_of_connections(
    sandbox: SandboxState, kube_api: client.ApiClient, pods: tuple[str, dict[str, str]]
) -> None:
    namespace, ips = pods
    core = client.CoreV1Api(kube_api)
    ports = [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}]
    core.create_namespaced_service(
        namespace, {"metadata": {"name": "halfdead"}, "spec": {"ports": ports}}
    )
    dead = "10.244.254.254"  # listed ready, but no pod of that IP runs: nothing to dial
    create_slice(
        kube_api,
        namespace,
        name="halfdead-mesh",
        service="halfdead",
        endpoints=[
            {"addresses": [ips["a"]], "conditions": {"ready": True}},
            {"addresses": [dead], "conditions": {"ready": True}},
        ],
        port_names=("http",),
    )
    address = _wait_listener(
        sandbox.run_dir, namespace, "halfdead", [f"{ips['a']}:8080", f"{dead}:8080"]
    )
    served: list[str | None] = []
    for _ in range(CONNECTIONS):  # a new connection each time: each picks an endpoint
        try:
            served.append(_served_model(address))
        except httpx.TransportError:
            served.append(None)
    # Binomial(40, 1/2): 20 +- 3.2 of them reach the dead endpoint and fail.
    assert 8 <= served.count(None) <= 32 and set(served) == {"a", None}, served
