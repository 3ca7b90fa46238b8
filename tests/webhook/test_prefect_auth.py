"""A Prefect server started with authentication (PREFECT_SERVER_API_AUTH_STRING): the
relay, the prefect CLI, a worker and the flow runs it starts authenticate with
PREFECT_API_AUTH_STRING, and an event posted without it is refused. The relay refuses
to start against an API that accepts anyone, or that refuses its credentials (exit 2,
saying what to set), unless given --insecure-prefect."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

from flows.webhook.events import read_merge_events, wait_persisted
from sandbox import procs
from tests.webhook.conftest import REPOSITORY, SECRET
from tests.webhook.deploy import (
    deploy_all,
    models_repository,
    remove_deployments,
    worker,
)
from tests.webhook.payloads import settled
from tests.webhook.servers import PrefectServer, relay_process
from tests.webhook.specrepo import SpecRepo
from tests.webhook.test_relay import ALPHA_MANIFEST, bare_remote, pushed
from tests.world import wait_until

pytestmark = pytest.mark.timeout(600)  # a Prefect server of its own
# A spec in the repository's specs directory, as a merge's event names it.
SPEC = "manifests/handoffs/clef-candle.yaml"
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}


def _serve(
    spec_repo: SpecRepo, api: str, tmp_path: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """`handoff webhook serve` expected to refuse at start (so it returns)."""
    argv = [sys.executable, "-m", "cli", "webhook", "serve", "--secret-env", "SECRET_ENV"]
    argv += ["--port", str(procs.free_port()), "--specs-dir", str(spec_repo.specs_dir)]
    argv += ["--state-dir", str(tmp_path / "state"), "--prefect-api-url", api]
    argv += ["--repository", REPOSITORY]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_")}
    return subprocess.run(
        argv,
        env={**clean, "SECRET_ENV": SECRET, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_relay_refuses_an_open_prefect_api(
    open_prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path
) -> None:
    result = _serve(spec_repo, open_prefect.api_url, tmp_path)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, output
    assert "accepts requests without authentication" in output, output
    assert "--insecure-prefect" in output and "PREFECT_SERVER_API_AUTH_STRING" in output


@pytest.mark.slow  # a Prefect server of its own; the open-API refusal runs by default
@pytest.mark.parametrize("credentials", [{}, {"PREFECT_API_AUTH_STRING": "handoff:wrong"}])
def test_the_relay_refuses_credentials_the_api_refuses(
    authed_prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path, credentials: dict[str, str]
) -> None:
    result = _serve(spec_repo, authed_prefect.api_url, tmp_path, **credentials)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, output
    assert "refused this relay's credentials" in output, output


@pytest.mark.slow  # a Prefect server of its own
def test_relay_worker_and_cli_authenticate_and_others_are_refused(
    authed_prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path
) -> None:
    auth = authed_prefect.auth_string or ""
    env = {"PREFECT_API_AUTH_STRING": auth}
    payload = pushed(spec_repo, {ALPHA_MANIFEST: "kind: Deployment\n"})
    with relay_process(
        specs_dir=spec_repo.specs_dir,
        api_url=authed_prefect.api_url,
        secret=SECRET,
        state_dir=tmp_path / "state",
        log=tmp_path / "relay.log",
        options=("--clone-url", str(bare_remote(spec_repo))),
        env=env,
    ) as relay:
        reply = settled(relay, payload, SECRET)
    assert reply["outcome"] == "emitted", reply
    with temporary_settings(
        {PREFECT_API_URL: authed_prefect.api_url, PREFECT_API_AUTH_STRING: auth}
    ):
        wait_persisted(authed_prefect.api_url)
        events = read_merge_events(
            authed_prefect.api_url,
            namespace=spec_repo.namespace,
            service=spec_repo.services["alpha"],
        )
    assert [e.merge.spec for e in events] == ["alpha"]
    # The open door is shut: an event, or a read, without the credentials is refused.
    forged = httpx.post(f"{authed_prefect.api_url}/events", json=[], timeout=30)
    assert forged.status_code == 401
    # prefect.yaml deployed with the prefect CLI, and a process worker running a merge's
    # run of it: the flow's own requests (its newest-merge check writes a probe event,
    # tags its run and reads the Service's merge events) carry the credentials too.
    repository = models_repository(tmp_path)
    trigger = {"source": "forgejo", "delivery_id": "d-authed", "merge_commit": "a" * 40}
    try:
        deployment = deploy_all(authed_prefect.api_url, repository.bare, auth=auth)
        with httpx.Client(headers=authed_prefect.headers, timeout=30) as http:
            created = http.post(
                f"{authed_prefect.api_url}/deployments/{deployment}/create_flow_run",
                json={"parameters": {"spec_file": SPEC, "trigger": trigger}},
            )
            assert created.status_code == 201, created.text
            run_url = f"{authed_prefect.api_url}/flow_runs/{created.json()['id']}"

            def ended() -> dict[str, object] | None:
                state = http.get(run_url).json()["state"]
                return state if state["type"] in FINAL else None

            with worker(authed_prefect.api_url, {**os.environ, **env}, tmp_path / "worker.log"):
                state = wait_until(ended, timeout_s=240, what="the deployment's run")
    finally:
        remove_deployments(authed_prefect.api_url, auth=auth)
    assert state["type"] == "CANCELLED", state
    assert "not among the Service's merge events" in str(state["message"]), state
