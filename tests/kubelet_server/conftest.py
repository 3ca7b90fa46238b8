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
from tests.kubelet_server.webproc import http_process

NAMESPACE, POD, CONTAINER, UID, CONTAINER_PORT = "ns1", "web", "web", "uid-1", 8080
PAGE = b"hello from the pod\n"


@dataclass
class Kubelet:
    table: PodTable
    server: RunningServer
    pki: Pki
    log: Path
    backend_port: int

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
            ports={CONTAINER_PORT: self.backend_port},
            running=running,
        )
        entry = RunningPod(UID, pod_ip="10.244.0.9", node="n1", containers={CONTAINER: container})
        self.table.put(NAMESPACE, POD, entry)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return ensure_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def kubelet(pki: Pki, tmp_path: Path) -> Iterator[Kubelet]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "hello.txt").write_bytes(PAGE)
    log = tmp_path / "container.log"
    log.write_bytes(b"line 1\nline 2\nline 3\n")
    with http_process(site, tmp_path / "http.log") as port:
        table = PodTable(tmp_path / "pod-ports.json")
        server = start_server(table, pki=pki)
        kubelet = Kubelet(table, server, pki, log, port)
        kubelet.put()
        try:
            yield kubelet
        finally:
            server.stop()
