"""Shared fixtures: one real sandbox control plane per test session, a fresh
namespace per test."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.webhook.servers import PrefectServer

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The suite's Prefect servers require credentials, as a deployment's must: one pair per
# test process, set before Prefect reads its settings, so that every client here and
# every process a test starts carries it (the sandbox's and the shared server require it).
os.environ.setdefault("PREFECT_API_AUTH_STRING", "handoff:" + uuid.uuid4().hex)
PREFECT_PAIR = os.environ["PREFECT_API_AUTH_STRING"]


SPARE_NODE = "worker-2"


def pytest_configure(config: pytest.Config) -> None:
    """The fault matrix's rotating subset and the run's start are pinned once for the run,
    before pytest-xdist starts its workers, which inherit them (tests/faults/rotation.py,
    tests/faults/results.py); each file's seconds
    are recorded where HANDOFF_RECORD_DURATIONS asks (tests/schedule.py)."""
    from tests.faults.results import pin_run_start
    from tests.faults.rotation import pin
    from tests.schedule import configure

    pin()
    pin_run_start()
    configure(config)


SEEDED_TIMEOUT_S = 600  # seeding, a handoff and the namespace's removal, on a loaded machine


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Test files longest first, as last recorded (tests/schedule.py). A test on a seeded
    namespace gets SEEDED_TIMEOUT_S unless it names its own: the default 300 s covers
    its setup, call and teardown together, and 74 s of seeding, a 222 s handoff and a
    namespace removal outran it on a loaded machine."""
    from tests.schedule import longest_first, recorded

    longest_first(items, recorded())
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        seeds = "seeded" in fixtures or "seeded_for_module" in fixtures
        if seeds and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SEEDED_TIMEOUT_S))


@pytest.fixture(autouse=True)
def _no_prefect_websocket_during_hypothesis(request: pytest.FixtureRequest) -> None:
    """A flow run in this process leaves Prefect's events client open on its own thread,
    and its websocket's keepalive pings draw from the global `random`: hypothesis, which
    watches that state while it generates, would blame the strategy. Close it first."""
    if request.node.get_closest_marker("hypothesis") and "prefect.events.worker" in sys.modules:
        from prefect.events.worker import EventsWorker

        EventsWorker.drain_all(timeout=10)


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxState]:  # noqa: F821
    """The sandbox brought up once for the run and down at the end.

    Its nodes are the seeds' (worker-1 with four V100s, cpu-1) plus a spare GPU node,
    worker-2, cordoned: tests that need more GPUs than the seeds had uncordon it.
    """
    from kubernetes import config

    from sandbox import manager

    chosen = os.environ.get("HANDOFF_TEST_SANDBOX_DIR")
    # Each pytest-xdist worker brings up a sandbox of its own.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    run_dir = Path(chosen) / worker if chosen else tmp_path_factory.mktemp("sandbox")
    # Its Prefect requires the suite's credentials (the ones the sandbox makes by itself
    # are tested in tests/handoff/test_prefect_credentials.py).
    state, _ = manager.up(
        run_dir, cluster_file=_test_cluster_file(run_dir.parent), prefect_pair=PREFECT_PAIR
    )
    api = config.new_client_from_config(config_file=str(state.kubeconfig))
    set_cordoned(api, SPARE_NODE, True)
    api.close()
    yield state
    manager.down(run_dir)


CLEF_SERVE_COLD_START_S = 80.0  # x time_scale 0.05: 4 s


def _test_cluster_file(directory: Path) -> Path:
    import yaml

    from sandbox.cluster import DEFAULT_CLUSTER_FILE

    raw = yaml.safe_load(DEFAULT_CLUSTER_FILE.read_text())
    raw["nodes"].append({"name": SPARE_NODE, "gpus": 4, "gpu_product": "Tesla-V100-PCIE-32GB"})
    for rule in raw["models"]:
        if rule.get("server") == "clef-serve":
            # Every seeded namespace waits for its clef-serve pod: 4 s instead of the
            # sandbox's 12 (still longer than a startup probe of 2 s, which a test breaks).
            rule["cold_start_s"] = CLEF_SERVE_COLD_START_S
    path = directory / "test-cluster.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def set_cordoned(api, node: str, cordoned: bool) -> None:  # type: ignore[no-untyped-def]
    from kubernetes import client

    client.CoreV1Api(api).patch_node(node, {"spec": {"unschedulable": cordoned}})


@pytest.fixture(scope="session")
def kube_api(sandbox):  # type: ignore[no-untyped-def]
    """An official-client ApiClient authenticated as the sandbox admin."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(sandbox.kubeconfig))
    yield api
    api.close()


@pytest.fixture
def namespace(kube_api, request: pytest.FixtureRequest) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A namespace of its own for each test, deleted afterwards."""
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    raw = request.node.name.lower().replace("_", "-")
    base = "".join(c for c in raw if c.isalnum() or c == "-")
    name = f"{base[:40].strip('-')}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    _wait_default_service_account(core, name)
    yield name
    core.delete_namespace(name)


def _wait_default_service_account(core, namespace: str) -> None:  # type: ignore[no-untyped-def]
    """Pods are refused until the controller-manager has made the default account."""
    from kubernetes import watch

    if core.list_namespaced_service_account(namespace).items:
        return
    w = watch.Watch()
    for _ in w.stream(core.list_namespaced_service_account, namespace, timeout_seconds=30):
        w.stop()
        return
    raise TimeoutError(f"no default ServiceAccount in namespace {namespace} after 30 s")


@pytest.fixture(scope="session")
def prefect(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> PrefectServer:
    """One Prefect server for the session (the relay, flow and UI tests'), requiring the
    suite's credentials (PREFECT_API_AUTH_STRING)."""
    from tests.webhook.servers import shared_prefect

    return shared_prefect(request, tmp_path_factory.mktemp("prefect"))


@pytest.fixture(scope="session")
def open_prefect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """A Prefect server without authentication, for what must refuse one."""
    from sandbox import procs
    from tests.webhook.servers import start_prefect

    server = start_prefect(tmp_path_factory.mktemp("prefect-open"))
    yield server
    procs.stop(server.process)


@pytest.fixture(scope="session")
def authed_prefect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """A Prefect server started as `handoff sandbox up` starts it: requiring the
    credentials made for its run directory (its auth_string)."""
    from sandbox import procs
    from tests.webhook.servers import start_prefect

    server = start_prefect(tmp_path_factory.mktemp("prefect-auth"), protected=True)
    yield server
    procs.stop(server.process)


# The real llama.cpp engine's servers, shared by the session.
from tests.engines.fixtures import llamacpp  # noqa: E402, F401

# The seeds' world (shared by the handoff, RBAC and end-to-end tests, built once).
from tests.world import (  # noqa: E402, F401
    handoff_env,
    kube,
    seeded,
    seeded_for_module,
    spare_gpus,
    world,
)
