"""The seeds' world for whole handoffs on the sandbox: repositories and CI-built images
in the sandbox registry, a namespace holding the before state, specs moved into that
namespace, and `handoff run` as a real process. Its fixtures are registered by
tests/conftest.py, so every directory shares one world."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from flows.kube.client import Kube, connect
from flows.spec import HandoffSpec, load_spec
from sandbox import prefect_server
from sandbox.publisher import publish
from sandbox.seed import (
    ORG,
    World,
    apply_before_state,
    create_world,
    merge_gdn_fix,
    publish_candle,
)
from sandbox.state import SandboxState
from tests.handoff.cancel_at import cancelled_at

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "manifests" / "handoffs"
BEFORE = ("candle-vllm", "clef-serve", "reasoning-long")
# Short, so a rerun soon takes over a killed run; long enough that a busy machine does
# not starve the renewal (a run whose Lease lapses stops writing).
LEASE_S = "15"
# The flow waits this long after the API shows no route to a pod before it stops the pod
# (flows/swap.py: 2 s, kube-proxy's 1 s min sync period and a margin). The sandbox's proxy
# keeps kube-proxy's period, but on a 2-core machine running the suite on both cores its
# watch and sync run late by more than that margin: the run gets the margin of a slower
# node, set as a deployment would set it for its own cluster.
PROXY_SYNC_S = "4"


@pytest.fixture(scope="session")
def world(sandbox: SandboxState, tmp_path_factory: pytest.TempPathFactory) -> World:
    """Repositories and images as after the fix was merged and CI published :sm70;
    the last build without the fix stays available as :sm70-nofix."""
    world = create_world(tmp_path_factory.mktemp("src"), sandbox.registry_url or "")
    publish(
        world.registry_url,
        f"{ORG}/candle-vllm",
        "sm70-nofix",
        git_repo=world.candle_vllm.path,
        commit="HEAD",
    )
    merge_gdn_fix(world)
    publish_candle(world)
    return world


@pytest.fixture(scope="session")
def handoff_env(sandbox: SandboxState, world: World) -> dict[str, str]:
    """The environment `handoff run` gets: cluster, Prefect, image overrides, sources."""
    return {
        **os.environ,
        **world.environment(),
        "KUBECONFIG": str(sandbox.kubeconfig),
        "PREFECT_API_URL": sandbox.prefect_api_url or "",
        "IMAGE_POLL_INTERVAL_S": "1",
        "HANDOFF_LEASE_S": LEASE_S,
        "HANDOFF_PROXY_SYNC_S": PROXY_SYNC_S,
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }


@pytest.fixture(scope="session")
def kube(sandbox: SandboxState) -> Iterator[Kube]:
    handle = connect(sandbox.kubeconfig)
    yield handle
    handle.close()


@pytest.fixture
def seeded(sandbox: SandboxState, kube: Kube, world: World) -> Iterator[str]:
    """A namespace holding the seeds' before state, applied with kubectl as its users
    did, all Ready; removed afterwards, waiting until its pods are gone so the next
    test finds the GPUs free."""
    yield from _seed(sandbox, kube, world)


@pytest.fixture(scope="module")
def seeded_for_module(sandbox: SandboxState, kube: Kube, world: World) -> Iterator[str]:
    """One seeded namespace shared by a module's tests: only for tests that leave it as
    they found it (a selector they move, put back)."""
    yield from _seed(sandbox, kube, world)


def _seed(sandbox: SandboxState, kube: Kube, world: World) -> Iterator[str]:
    namespace = f"llm-{uuid.uuid4().hex[:8]}"
    apply_before_state(sandbox.kubeconfig, world, namespace)
    wait_deployments_ready(kube, namespace, BEFORE)
    yield namespace
    remove_seeded(kube, namespace)


def remove_seeded(kube: Kube, namespace: str) -> None:
    """Delete a seeded namespace and its PersistentVolume, waiting until its pods are gone."""
    kube.core.delete_namespace(namespace)
    deadline = time.monotonic() + 120
    while kube.core.list_namespaced_pod(namespace).items and time.monotonic() < deadline:
        time.sleep(0.5)
    kube.core.delete_persistent_volume(f"llm-models-{namespace}")


def wait_deployments_ready(
    kube: Kube, namespace: str, names: tuple[str, ...], timeout_s: float = 120
) -> None:
    deadline = time.monotonic() + timeout_s
    for name in names:
        while True:
            d = kube.apps.read_namespaced_deployment(name, namespace)
            if (d.status.ready_replicas or 0) >= (d.spec.replicas or 0):
                break
            assert time.monotonic() < deadline, f"{namespace}/{name} not Ready in {timeout_s} s"
            time.sleep(0.3)


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def spec_in(namespace: str, name: str, out_dir: Path, **changes: Any) -> Path:
    """The seed spec `name`, moved into `namespace`, with changes merged in. The files it
    names from this repository are copied beside it: a spec names only files in its own
    tree (here out_dir, in no repository)."""
    raw = yaml.safe_load((SPECS / f"{name}.yaml").read_text())
    raw["namespace"] = namespace
    for node, key in _named_files(raw):
        node[key] = str((SPECS / node[key]).resolve())
    raw = _merge(raw, copy.deepcopy(changes))
    for node, key in _named_files(raw):
        node[key] = _beside(out_dir, Path(node[key]))
    path = out_dir / f"{name}-{namespace}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _named_files(raw: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """(the mapping, its key) of each file a spec names."""
    gates = raw["gates"]
    named = [(raw["candidate"], "manifest")]
    named += [(gates["parity"], "golden")] if gates.get("parity") else []
    task = gates.get("task") or {}
    return named + [(task, key) for key in ("suite", "golden") if task.get(key)]


def _beside(out_dir: Path, file: Path) -> str:
    """A file of this repository copied under out_dir (at its repository path); any other
    file as named."""
    if not file.is_absolute() or not file.is_relative_to(ROOT):
        return str(file)
    copy = out_dir / "repository" / file.relative_to(ROOT)
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(file, copy)
    return str(copy)


def load_spec_as_run(spec_file: Path, env: dict[str, str]) -> HandoffSpec:
    """The spec as `handoff run` with env loads it (image overrides, source repos)."""
    saved = {k: os.environ.get(k) for k in ("HANDOFF_IMAGES", "CANDLE_VLLM_SOURCE")}
    os.environ.update({k: env[k] for k in saved})
    try:
        return load_spec(spec_file)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def handoff_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


def run_handoff(
    spec: Path, env: dict[str, str], *extra: str, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        handoff_cli("run", str(spec), *extra),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def run_rollback(
    spec: Path, env: dict[str, str], reason: str, *, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    """`handoff rollback SPEC --reason REASON`, to its end."""
    return subprocess.run(
        handoff_cli("rollback", str(spec), "--reason", reason),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def start_handoff(
    spec: Path, env: dict[str, str], *extra: str, at: str | None = None
) -> subprocess.Popen[str]:
    """`handoff run` in its own session; at: module:function where it SIGKILLs itself
    (tests/handoff/cancel_at.py)."""
    args = ("run", str(spec), *extra)
    return subprocess.Popen(
        cancelled_at(at, *args, kill=True) if at else handoff_cli(*args),
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@contextmanager
def handoff_process(
    spec: Path, env: dict[str, str], *extra: str
) -> Iterator[subprocess.Popen[str]]:
    """`handoff run` in the background, killed on the way out if it has not ended."""
    process = start_handoff(spec, env, *extra)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def service(kube: Kube, namespace: str, name: str) -> client.V1Service:
    return kube.core.read_namespaced_service(name, namespace)


def await_phase(
    kube: Kube,
    namespace: str,
    name: str,
    phase: str,
    process: subprocess.Popen[str],
    timeout_s: float = 240,
) -> None:
    """Wait until the ledger on Service `name` reaches `phase` while `process` runs. On a
    watch, so a phase that lasts one write (`swapped` when the candidate is already at
    its count) is seen, and seen at once."""
    from flows.ledger import parse_ledger

    def reached(_kind: str, found: Any) -> bool:
        ledger = parse_ledger(found.metadata.annotations or {})
        return ledger is not None and ledger.phase == phase

    watch_until(
        kube.core.list_namespaced_service, namespace, name, reached, process, phase, timeout_s
    )


def watch_until(
    list_fn: Any,
    namespace: str,
    name: str,
    seen: Any,
    process: subprocess.Popen[str],
    what: str,
    timeout_s: float,
    *,
    listed: Any = None,
) -> None:
    """Follow the object `name` from the list `listed` (one made now if none) through
    every version of it until `seen(event type, object)` is true ("LISTED" for what the
    list held), while `process` runs; its output is quoted if it ends first."""
    from kubernetes import watch

    listed = listed or list_fn(namespace, field_selector=f"metadata.name={name}")
    if any(seen("LISTED", item) for item in listed.items):
        return
    version = listed.metadata.resource_version
    deadline = time.monotonic() + timeout_s
    while True:
        stream = watch.Watch().stream(
            list_fn,
            namespace,
            field_selector=f"metadata.name={name}",
            resource_version=version,
            timeout_seconds=2,
        )
        for event in stream:
            found = event["object"]
            version = found.metadata.resource_version
            if seen(event["type"], found):
                return
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout else ""
            raise AssertionError(f"the handoff ended before reaching {what}\n{output[-4000:]}")
        assert time.monotonic() < deadline, f"the handoff never reached {what}"


@pytest.fixture
def spare_gpus(kube: Kube) -> Iterator[str]:
    """The spare GPU node uncordoned for one test (cordoned again afterwards)."""
    from tests.conftest import SPARE_NODE, set_cordoned

    set_cordoned(kube.api, SPARE_NODE, False)
    yield SPARE_NODE
    set_cordoned(kube.api, SPARE_NODE, True)


def _artifacts(sandbox: SandboxState, flow_run_id: str, kind: str) -> list[dict[str, Any]]:
    """The flow run's artifacts of one type, as the Prefect server holds them."""
    response = httpx.post(
        f"{sandbox.prefect_api_url}/artifacts/filter",
        json={"artifacts": {"flow_run_id": {"any_": [flow_run_id]}, "type": {"any_": [kind]}}},
        headers=prefect_server.basic_auth(prefect_server.auth_string(sandbox.run_dir)),
        timeout=30,
        trust_env=False,
    )
    response.raise_for_status()
    return list(response.json())


def _markdown(sandbox: SandboxState, flow_run_id: str, prefix: str) -> str:
    """The run's last markdown artifact whose key starts with `prefix`."""
    found = _artifacts(sandbox, flow_run_id, "markdown")
    texts = [a["data"] for a in found if (a.get("key") or "").startswith(prefix)]
    assert texts, f"no {prefix}* artifact for flow run {flow_run_id}: {[a['key'] for a in found]}"
    return str(texts[-1])


def handoff_report(sandbox: SandboxState, flow_run_id: str) -> str:
    """The handoff's markdown report, as the Prefect server holds it."""
    return _markdown(sandbox, flow_run_id, "handoff-")


def handoff_pictures(sandbox: SandboxState, flow_run_id: str, kind: str = "latency") -> str:
    """The run's pictures artifact of `kind` (latency, parity, timeline): markdown with
    embedded PNGs."""
    return _markdown(sandbox, flow_run_id, f"{kind}-")


def handoff_progress(sandbox: SandboxState, flow_run_id: str) -> float:
    """The handoff's progress artifact (percent), as the Prefect server holds it."""
    found = _artifacts(sandbox, flow_run_id, "progress")
    assert len(found) == 1, f"flow run {flow_run_id}: progress artifacts {found}"
    return float(found[0]["data"])


def wait_until(check: Any, *, timeout_s: float, what: str, every_s: float = 1.0) -> Any:
    """The first truthy `check()`, polled every `every_s`; AssertionError naming `what` at
    the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)
