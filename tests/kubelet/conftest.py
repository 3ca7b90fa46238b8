"""Fixtures for the kubelet tests: the sandbox's kubelet and images in its registry.

The kubelet is the session sandbox's own when the sandbox runs one (a component named
``kubelet``); otherwise one is started here, against the session control plane and a
registry of its own, exactly as the manager would start it, and stopped at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from sandbox import procs
from sandbox.cluster import DEFAULT_CLUSTER_FILE
from sandbox.kubelet import launch
from sandbox.registry import Registry
from sandbox.simbuild import SimBuild
from tests.kubelet.images import push_labelled_image


@dataclass(frozen=True)
class SandboxKubelet:
    run_dir: Path  # holds kubelet/ (container logs, process records) and pod-ports.json
    registry_url: str
    kubeconfig: Path  # the kubelet's own credentials

    @property
    def registry_host(self) -> str:
        return self.registry_url.split("://", 1)[1]


@dataclass(frozen=True)
class SandboxImages:
    cadence: str  # no server label: the default profile
    candle: str  # dev.handoff.sim.server=candle-vllm, no faults
    clef_serve: str  # dev.handoff.sim.server=clef-serve: a cold start (tests/conftest.py: 4 s)


@pytest.fixture(scope="session")
def kubelet(sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxKubelet]:  # type: ignore[no-untyped-def]
    kubeconfig = sandbox.run_dir / "etc" / "kubelet.kubeconfig"
    if any(p.name == "kubelet" for p in sandbox.components):
        yield SandboxKubelet(sandbox.run_dir, sandbox.registry_url, kubeconfig)
        return
    registry = None
    if sandbox.registry_url is None:
        registry = Registry.start(tmp_path_factory.mktemp("kubelet-registry"))
    url = sandbox.registry_url or registry.url
    record = launch.start(
        run_dir=sandbox.run_dir,
        kubeconfig=kubeconfig,
        cluster=DEFAULT_CLUSTER_FILE,
        registry_url=url,
        pki=sandbox.run_dir / "pki",
    )
    yield SandboxKubelet(sandbox.run_dir, url, kubeconfig)
    procs.stop(record)
    if registry is not None:
        registry.stop()


@pytest.fixture(scope="session")
def images(kubelet: SandboxKubelet) -> SandboxImages:
    builds = {
        "cadence": None,
        "candle-vllm": SimBuild(server="candle-vllm"),
        "clef-serve": SimBuild(server="clef-serve"),
    }
    for repository, build in builds.items():
        push_labelled_image(kubelet.registry_url, f"kubelet-tests/{repository}", "v1", build)
    prefix = f"{kubelet.registry_host}/kubelet-tests"
    return SandboxImages(
        cadence=f"{prefix}/cadence:v1",
        candle=f"{prefix}/candle-vllm:v1",
        clef_serve=f"{prefix}/clef-serve:v1",
    )


@pytest.fixture
def core(kube_api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api)
