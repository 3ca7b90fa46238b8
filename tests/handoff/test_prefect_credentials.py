"""The sandbox's Prefect requires credentials made once per sandbox, and the `handoff`
commands that talk to Prefect use PREFECT_API_AUTH_STRING: without it (or with a wrong
one) they stop before doing anything, naming the server, the 401 and what to set; with
the credentials `handoff sandbox env` exports, `handoff run` hands a Service off."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from prefect import flow, get_client
from prefect.client.orchestration import SyncPrefectClient
from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings
from prefect.states import Pending

from flows.kube.client import Kube
from flows.ledger import parse_ledger
from sandbox import prefect_server
from sandbox.state import SandboxState, write_state
from tests.webhook.servers import PrefectServer, basic_auth
from tests.world import run_handoff, service, spec_in

SPEC = Path(__file__).resolve().parents[2] / "manifests" / "handoffs" / "clef-candle.yaml"
WRONG = {"PREFECT_API_AUTH_STRING": "handoff:wrong"}
SMOKE_ONLY = {"parity": None, "latency": None}


def _handoff(api: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The real `handoff` command with only this Prefect (and these credentials)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_")}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        env={**clean, "PREFECT_API_URL": api, "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
        timeout=300,  # importing Prefect on a loaded machine
    )


def _refused(result: subprocess.CompletedProcess[str], api: str) -> None:
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, output
    assert f"Prefect API {api} answered 401 Unauthorized" in output, output
    assert "set PREFECT_API_AUTH_STRING" in output and "Traceback" not in output, output


@flow(name="credentials-probe")
def _probe() -> None:
    """Never run: a flow for pending runs to belong to."""


@contextmanager
def _client(server: PrefectServer) -> Iterator[SyncPrefectClient]:
    """Prefect's own client with the credentials (it retries a busy server's 503s)."""
    settings = {PREFECT_API_URL: server.api_url, PREFECT_API_AUTH_STRING: server.auth_string}
    with temporary_settings(settings), get_client(sync_client=True) as client:
        yield client


def _flow_run(server: PrefectServer) -> str:
    """A pending flow run, made with the credentials."""
    with _client(server) as client:
        return str(client.create_flow_run(_probe, state=Pending()).id)


def _flow_runs(server: PrefectServer) -> list[tuple[str, str]]:
    """Each flow run's id and state (what a run or a resume would change)."""
    with _client(server) as client:
        runs = client.read_flow_runs()
    return sorted(
        (str(run.id), str(run.state_type.value if run.state_type else None)) for run in runs
    )


def test_each_sandbox_gets_its_own_credentials_readable_by_its_owner_only(
    tmp_path: Path,
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for run_dir in (one, two):
        run_dir.mkdir()
        prefect_server.protect(run_dir)
        assert stat.S_IMODE(prefect_server.auth_file(run_dir).stat().st_mode) == 0o600
    first, second = prefect_server.auth_string(one), prefect_server.auth_string(two)
    assert first and second and first != second
    user, _, password = first.partition(":")
    assert user == "handoff" and len(password) >= 32
    with pytest.raises(FileExistsError):  # made once: a second call never replaces them
        prefect_server.protect(one)
    assert prefect_server.auth_string(one) == first
    env = prefect_server.client_env(one, "http://127.0.0.1:1/api")
    assert env == {"PREFECT_API_URL": "http://127.0.0.1:1/api", "PREFECT_API_AUTH_STRING": first}
    assert (
        prefect_server.server_env(one, 1, auth_string=first)["PREFECT_SERVER_API_AUTH_STRING"]
        == first
    )


@pytest.mark.slow  # a Prefect server of its own (tests/conftest.py's authed_prefect)
def test_the_sandbox_prefect_refuses_anonymous_requests_and_takes_its_credentials(
    authed_prefect: PrefectServer,
) -> None:
    stored = prefect_server.auth_string(authed_prefect.home.parent)
    assert stored and stored == authed_prefect.auth_string
    url = f"{authed_prefect.api_url}/flows/filter"
    for auth, status in ((None, 401), ("handoff:wrong", 401), (stored, 200)):
        assert httpx.post(url, json={}, headers=basic_auth(auth), timeout=30).status_code == status


@pytest.mark.slow  # a Prefect server of its own
@pytest.mark.parametrize("credentials", [{}, WRONG], ids=["none", "wrong"])
def test_commands_without_the_credentials_stop_before_doing_anything(
    authed_prefect: PrefectServer, credentials: dict[str, str]
) -> None:
    api = authed_prefect.api_url
    run_id = _flow_run(authed_prefect)
    before = _flow_runs(authed_prefect)
    _refused(_handoff(api, "approve", run_id, "--approver", "ada", **credentials), api)
    # No cluster is named: a run that got past the check would fail differently.
    run = _handoff(
        api, "run", str(SPEC), "--auto-approve", KUBECONFIG="/nonexistent", **credentials
    )
    _refused(run, api)
    assert _flow_runs(authed_prefect) == before  # no run started, none resumed


@pytest.mark.slow  # a Prefect server of its own
def test_the_sandbox_env_gives_the_commands_its_credentials(
    authed_prefect: PrefectServer,
) -> None:
    """`eval "$(handoff sandbox env)"`, as docs/sandbox.md has it, then `handoff approve`."""
    run_dir = authed_prefect.home.parent
    write_state(  # as `sandbox up` records it (only Prefect runs here)
        SandboxState(
            run_dir=run_dir,
            kubeconfig=run_dir / "kubeconfig",
            server="https://127.0.0.1:1",
            prefect_api_url=authed_prefect.api_url,
            components=[authed_prefect.process],
        )
    )
    exports = _handoff("", "sandbox", "env", "--run-dir", str(run_dir))
    assert exports.returncode == 0, exports.stderr
    assert "export PREFECT_API_AUTH_STRING=" in exports.stdout
    # status says where the credentials are, and never prints them
    status = _handoff("", "sandbox", "status", "--run-dir", str(run_dir))
    assert str(prefect_server.auth_file(run_dir)) in status.stdout, status.stdout
    assert (authed_prefect.auth_string or "-") not in status.stdout + status.stderr
    run_id = _flow_run(authed_prefect)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_")}
    script = f'eval "$({sys.executable} -m cli sandbox env --run-dir {run_dir})" && '
    script += f"{sys.executable} -m cli approve {run_id} --approver ada"
    result = subprocess.run(
        ["bash", "-c", script], env=clean, capture_output=True, text=True, timeout=300
    )
    output = " ".join((result.stdout + result.stderr).split())
    # Authenticated, it read the run and found nothing paused to resume.
    assert result.returncode == 2 and "isn't paused" in output, output
    assert "401" not in output, output
    assert str(uuid.UUID(run_id)) in output


def _cluster(kube: Kube, namespace: str) -> dict[str, object]:
    """What a handoff writes in the namespace: its Services (as stored), the Deployments'
    specs, Leases and Events on Services."""
    core = kube.core
    return {
        "services": {
            s.metadata.name: s.metadata.resource_version
            for s in core.list_namespaced_service(namespace).items
        },
        "deployments": {
            d.metadata.name: d.metadata.generation
            for d in kube.apps.list_namespaced_deployment(namespace).items
        },
        "leases": kube.coordination.list_namespaced_lease(namespace).items,
        "service events": core.list_namespaced_event(
            namespace, field_selector="involvedObject.kind=Service"
        ).items,
    }


RunClef = Callable[[dict[str, str]], subprocess.CompletedProcess[str]]


@pytest.fixture
def run_clef(
    seeded: str, tmp_path: Path, handoff_env: dict[str, str], authed_prefect: PrefectServer
) -> RunClef:
    """`handoff run --auto-approve` of clef-candle in the seeded namespace (smoke gate
    only) against the authenticated Prefect, with the credentials given."""
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates=SMOKE_ONLY)
    env = {k: v for k, v in handoff_env.items() if not k.startswith("PREFECT_API_")}
    env["PREFECT_API_URL"] = authed_prefect.api_url
    return lambda credentials: run_handoff(spec_file, env | credentials, "--auto-approve")


def test_a_handoff_run_without_the_credentials_changes_nothing_on_the_cluster(
    authed_prefect: PrefectServer, kube: Kube, seeded: str, run_clef: RunClef
) -> None:
    cluster, runs = _cluster(kube, seeded), _flow_runs(authed_prefect)
    _refused(run_clef({}), authed_prefect.api_url)
    assert _cluster(kube, seeded) == cluster
    assert _flow_runs(authed_prefect) == runs


@pytest.mark.slow  # a whole handoff (smoke gate only): about a minute with its namespace
def test_a_handoff_run_with_the_sandbox_credentials_completes(
    authed_prefect: PrefectServer, kube: Kube, seeded: str, run_clef: RunClef
) -> None:
    # The credentials as `handoff sandbox env` exports them for this server's run directory.
    exported = prefect_server.client_env(authed_prefect.home.parent, authed_prefect.api_url)
    assert exported["PREFECT_API_AUTH_STRING"] == authed_prefect.auth_string
    runs = _flow_runs(authed_prefect)
    result = run_clef(exported)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    ledger = parse_ledger(service(kube, seeded, "clef-serve").metadata.annotations)
    assert ledger is not None and ledger.phase == "done", output[-3000:]
    # The run is the one new flow run on this server, and it completed there.
    new = sorted(set(_flow_runs(authed_prefect)) - set(runs))
    assert [state for _, state in new] == ["COMPLETED"], new
