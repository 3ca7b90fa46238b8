"""Pods run by the sandbox's real kubelet, for tests that go through the real apiserver.

Each pod runs the simulated model server from an unlabelled image (the cadence profile)
and names its model after itself (`--served-model-name`), so a response says which pod
answered.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kubernetes import client

from sandbox.paths import k8s_bin_dir
from sandbox.simbuild import SimBuild
from sandbox.state import SandboxState
from tests.conftest import _wait_default_service_account
from tests.kubelet import objects
from tests.kubelet.images import push_labelled_image
from tests.kubelet.waits import is_ready, wait_for

SYSTEM_KUBECTL = Path("/usr/bin/kubectl")
POD_READY_TIMEOUT_S = 90.0


def kubectls() -> list[Path]:
    """kubectl 1.20 (built beside the control plane) and the system's, those present."""
    return [p for p in (k8s_bin_dir() / "kubectl", SYSTEM_KUBECTL) if p.is_file()]


def require_components(sandbox: SandboxState, *names: str) -> None:
    running = {p.name for p in sandbox.components}
    missing = [n for n in names if n not in running]
    assert not missing, (
        f"the session sandbox runs {sorted(running)} but not {missing}: "
        "sandbox/manager.py must start them for these tests"
    )


def push_server_image(sandbox: SandboxState, build: SimBuild | None = None) -> str:
    """An image labelled for build (None: no server label) in the sandbox registry."""
    assert sandbox.registry_url, "the session sandbox has no registry"
    repository = f"streaming-tests/{build.server if build else 'cadence'}"
    push_labelled_image(sandbox.registry_url, repository, "v1", build)
    return f"{sandbox.registry_url.split('://', 1)[1]}/{repository}:v1"


@contextmanager
def scratch_namespace(core: client.CoreV1Api, prefix: str) -> Iterator[str]:
    """A namespace for a whole test module, deleted afterwards."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        _wait_default_service_account(core, name)
        yield name
    finally:
        core.delete_namespace(name)


def start_server_pods(
    core: client.CoreV1Api, namespace: str, image: str, names: list[str]
) -> dict[str, client.V1Pod]:
    """One model-server pod per name (label app=<name>, model <name>), once all are Ready."""
    for name in names:
        main = objects.container(image, args=["--served-model-name", name])
        core.create_namespaced_pod(namespace, objects.pod(name, objects.pod_spec(main)))

    def all_ready(pods: list[client.V1Pod]) -> dict[str, client.V1Pod] | None:
        ready = {p.metadata.name: p for p in pods if is_ready(p)}
        return ready if set(names) <= set(ready) else None

    return wait_for(
        core.list_namespaced_pod,
        all_ready,
        namespace=namespace,
        timeout_s=POD_READY_TIMEOUT_S,
        what=f"pods {names} Ready",
    )
