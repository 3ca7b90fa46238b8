"""Fixtures for the kubelet server tested on its own: a CA and certificates, a plain
HTTP process standing in for a container, and the server over a real pod table."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox.certs import Pki, ensure_pki
from sandbox.kubelet.runtime import ContainerRuntime, PodTable, RunningPod
from sandbox.kubelet.server import RunningServer, start_server
from tests.kubelet_server.webproc import echo_process, http_process

NAMESPACE, POD, CONTAINER, UID, CONTAINER_PORT = "ns1", "web", "web", "uid-1", 8080
ECHO_PORT = 7000
PAGE = b"hello from the pod\n"


@dataclass
class Kubelet:
    table: PodTable
    server: RunningServer
    pki: Pki
    log: Path
    backend_port: int
    echo_port: int

    @property
    def base(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def client_tls(self) -> ssl.SSLContext:
        """What the apiserver presents: the CA-signed kubelet client certificate."""
        context = ssl.create_default_context(cafile=self.pki.ca_crt)
        context.load_cert_chain(self.pki.kubelet_client_crt, self.pki.kubelet_client_key)
        return context

    def put(self, *, running: bool = True, log: Path | None = None) -> None:
        container = ContainerRuntime(
            log_path=log or self.log,
            previous_log_path=None,
            ports={CONTAINER_PORT: self.backend_port, ECHO_PORT: self.echo_port},
            running=running,
        )
        entry = RunningPod(UID, pod_ip="10.244.0.9", node="n1", containers={CONTAINER: container})
        self.table.put(NAMESPACE, POD, entry)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return ensure_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def running_kubelet(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubelet]:
    base = tmp_path_factory.mktemp("kubelet-server")
    site = base / "site"
    site.mkdir()
    (site / "hello.txt").write_bytes(PAGE)
    with (
        http_process(site, base / "http.log") as port,
        echo_process(base / "echo.log") as echo,
    ):
        table = PodTable(base / "pod-ports.json")
        server = start_server(table, pki=pki)
        try:
            yield Kubelet(table, server, pki, base / "container.log", port, echo)
        finally:
            server.stop()


@pytest.fixture
def kubelet(running_kubelet: Kubelet) -> Kubelet:
    """The module's server, its pod entry and container log reset for each test."""
    running_kubelet.log.write_bytes(b"line 1\nline 2\nline 3\n")
    running_kubelet.put()
    return running_kubelet
