"""One retry policy in front of the real apiserver and the real registry: a proxy on
loopback answers 503 and 429 (with Retry-After) a few times, and reads and writes still
succeed, each retry logged; an apiserver or registry that never recovers fails the call
once the policy's bound has passed, not before and not never; a 409 on an update is
met by reading again and recomputing, so another writer's change is kept."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from flows.kube import read, write
from flows.kube.client import Kube, KubeUnavailable, connect
from flows.kube.wait import wait_pods
from ociclient.client import RegistryClient
from ociclient.errors import RegistryUnavailable
from sandbox import controlplane
from sandbox.registry import Registry
from tests.kube.faultproxy import Fault, Faults, fault_proxy
from tests.lease.test_lease import SERVICE

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def faulty(plane: controlplane.ControlPlane, tmp_path: Path) -> Iterator[tuple[Kube, Faults]]:
    """A client of the control plane whose every request passes the fault proxy."""
    with fault_proxy(plane.server, ca=plane.ca_crt) as (url, faults):
        config = yaml.safe_load(plane.kubeconfig.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"] = {"server": url}
        kubeconfig = tmp_path / "through-proxy.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config))
        kube = connect(kubeconfig)
        yield kube, faults
        kube.close()


def _retries_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "flows.retry"]


def test_503_and_429_from_the_apiserver_are_retried(
    faulty: tuple[Kube, Faults], ns: str, caplog: pytest.LogCaptureFixture
) -> None:
    kube, faults = faulty
    path = f"/namespaces/{ns}/services/{SERVICE}"
    faults.rules += [
        Fault("GET", path, 503, 2),
        Fault("GET", path, 429, 1, retry_after="1"),
        Fault("PATCH", path, 503, 2),
    ]
    caplog.set_level(logging.WARNING, logger="flows.retry")
    started = time.monotonic()
    service = read.read_service(kube, ns, SERVICE)
    assert time.monotonic() - started >= 1.0, "Retry-After was not waited for"
    assert service.name == SERVICE
    write.update_service_selector(
        kube, ns, SERVICE, {"app": "retried"}, expected=lambda found: found == service.selector
    )
    assert read.read_service(kube, ns, SERVICE).selector == {"app": "retried"}
    assert faults.statuses("GET", path)[:4] == [503, 503, 429, 200]
    assert faults.statuses("PATCH", path) == [503, 503, 200]
    logged = _retries_logged(caplog)
    print("\n".join(logged))
    assert len(logged) == 5 and all("answered" in m and "injected" in m for m in logged), logged


def test_an_apiserver_that_never_recovers_fails_the_call_within_the_bound(
    faulty: tuple[Kube, Faults], ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube, faults = faulty
    monkeypatch.setenv("HANDOFF_RETRY_S", "3")
    faults.rules.append(Fault("GET", f"/namespaces/{ns}/services/{SERVICE}", 503, -1))
    started = time.monotonic()
    with pytest.raises(KubeUnavailable, match="503"):
        read.read_service(kube, ns, SERVICE)
    elapsed = time.monotonic() - started
    assert 1.0 < elapsed < 10, elapsed
    assert len(faults.statuses("GET", SERVICE)) >= 3


def test_a_conflicting_update_is_read_again_and_keeps_the_other_writers_change(
    admin: Kube, ns: str
) -> None:
    seen: list[dict[str, str]] = []

    def compute(annotations: dict[str, str]) -> dict[str, str | None]:
        seen.append(dict(annotations))
        if len(seen) == 1:  # another writer gets in between this read and this write
            admin.core.patch_namespaced_service(
                SERVICE, ns, {"metadata": {"annotations": {"person": "edited"}}}
            )
        return {"handoff": f"saw-{len(annotations)}"}

    assert write.update_service_annotations(admin, ns, SERVICE, compute)
    annotations = read.read_service(admin, ns, SERVICE).annotations
    assert len(seen) == 2 and seen[1].get("person") == "edited", seen
    assert annotations["person"] == "edited", "the other writer's change was overwritten"
    assert annotations["handoff"] == "saw-1"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    started = Registry.start(tmp_path_factory.mktemp("registry"))
    yield started
    started.stop()


def test_503_and_429_from_the_registry_are_retried(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    repository = f"retry/{uuid.uuid4().hex[:8]}"
    caplog.set_level(logging.WARNING, logger="flows.retry")
    with fault_proxy(registry.url) as (url, faults):
        path = f"/v2/{repository}/manifests/v1"
        faults.rules += [Fault("HEAD", path, 503, 2), Fault("HEAD", path, 429, 1, "1")]
        with RegistryClient(url) as client:
            assert client.resolve(repository, "v1") is None  # the real registry: no such tag
        assert faults.statuses("HEAD", path) == [503, 503, 429, 404]
    assert len(_retries_logged(caplog)) == 3


def test_a_registry_that_never_recovers_fails_within_the_bound(registry: Registry) -> None:
    with fault_proxy(registry.url) as (url, faults):
        faults.rules.append(Fault("HEAD", "/v2/", 503, -1))
        with RegistryClient(url, retry_s=2) as client:  # built outside the timed part
            started = time.monotonic()
            with pytest.raises(RegistryUnavailable):
                client.resolve("retry/never", "v1")
            took = time.monotonic() - started
        assert 0.5 < took < 8, f"gave up after {took:.1f} s, expected about 2 s"
        assert len(faults.statuses("HEAD", "/v2/")) >= 3


def test_a_wait_rides_out_an_api_server_restart(
    plane: controlplane.ControlPlane, admin: Kube, ns: str
) -> None:
    """The watch's stream breaks when the API server dies; the wait lists again (retried
    until it is back) and still sees what happens after."""
    result: list[object] = []

    def wait() -> None:
        try:
            result.append(
                wait_pods(
                    admin,
                    ns,
                    {"app": "late"},
                    decide=lambda pods: pods[0].name if pods else None,
                    deadline_s=120,
                    what="the late pod",
                )
            )
        except Exception as exc:
            result.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(2)  # the watch is open
    with controlplane.apiserver_outage(plane):
        time.sleep(3)
    container = {"name": "c", "image": "example.invalid/c:1"}
    admin.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "late", "labels": {"app": "late"}},
            "spec": {"automountServiceAccountToken": False, "containers": [container]},
        },
    )
    waiter.join(timeout=150)
    assert result == ["late"], result
