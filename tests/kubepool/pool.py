"""The Kubernetes work pool of prefect.yaml on the sandbox's Prefect server: the pool,
the deployment as `prefect deploy` makes it, a Prefect Kubernetes worker as a process,
and flow runs created and awaited through the REST API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import get_client
from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.objects import State
from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

from flows.spec import declared_environment
from flows.workpool import render_pool_template

ROOT = Path(__file__).resolve().parents[2]
POOL = "handoff-kubernetes"
DEPLOYMENT = "handoff-on-merge-kubernetes"


def prefect(env: dict[str, str], *args: str, timeout_s: float = 180) -> str:
    """Run the prefect CLI of this environment from the repository root; its output."""
    result = subprocess.run(
        [sys.executable, "-m", "prefect", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"prefect {' '.join(args)}:\n{output[-3000:]}"
    return output


def deploy(
    api_url: str, image: str, auth: str | None = None, *, service_account: str = "handoff"
) -> str:
    """The pool (its template rendered for `image`, pinned, and `service_account`) and
    prefect.yaml's Kubernetes deployment, as docs/operating.md has them; its id. auth: the
    `user:password` a server with authentication requires."""
    env = {**os.environ, "PREFECT_API_URL": api_url}
    if auth:
        env["PREFECT_API_AUTH_STRING"] = auth
    env.setdefault("HANDOFF_REPOSITORY", str(ROOT))
    with tempfile.TemporaryDirectory() as scratch:
        template = Path(scratch) / "pool.json"
        specs = sorted((ROOT / "manifests" / "handoffs").glob("*.yaml"))
        declared = [n for f in specs for n in declared_environment(f)]
        rendered = render_pool_template(image, service_account=service_account, declared=declared)
        template.write_text(json.dumps(rendered))
        prefect(
            env,
            *("work-pool", "create", POOL, "--type", "kubernetes", "--overwrite"),
            *("--base-job-template", str(template)),
        )
    prefect(env, "--no-prompt", "deploy", "--name", DEPLOYMENT)
    with prefect_client(api_url, auth) as c:
        return str(c.read_deployment_by_name(f"handoff/{DEPLOYMENT}").id)


@contextmanager
def worker(api_url: str, kubeconfig: Path, namespace: str, log: Path) -> Iterator[None]:
    """`prefect worker start --pool handoff-kubernetes --type kubernetes` with the
    worker's ServiceAccount; stopped (SIGINT, then SIGKILL) on the way out."""
    env = {
        **os.environ,
        "PREFECT_API_URL": api_url,
        "KUBECONFIG": str(kubeconfig),
        # The worker's identity may not read kube-system's Namespace, where the
        # worker would otherwise find the cluster's uid.
        "PREFECT_KUBERNETES_CLUSTER_UID": "handoff",
        "PREFECT_INTEGRATIONS_KUBERNETES_OBSERVER_NAMESPACES": namespace,
        "PREFECT_WORKER_QUERY_SECONDS": "1",
    }
    argv = [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*argv, "--type", "kubernetes"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def prefect_client(api_url: str, auth: str | None = None) -> Iterator[SyncPrefectClient]:
    """Prefect's own client (it retries the 503s of a busy SQLite server)."""
    # Without `auth`, the process's own credentials ($PREFECT_API_AUTH_STRING).
    settings = {
        PREFECT_API_URL: api_url,
        PREFECT_API_AUTH_STRING: auth or os.environ.get("PREFECT_API_AUTH_STRING"),
    }
    with temporary_settings(settings), get_client(sync_client=True) as c:
        yield c


def create_run(
    api_url: str,
    deployment_id: str,
    parameters: dict[str, Any],
    job_variables: dict[str, Any],
    auth: str | None = None,
) -> str:
    with prefect_client(api_url, auth) as c:
        run = c.create_flow_run_from_deployment(
            UUID(deployment_id), parameters=parameters, job_variables=job_variables
        )
    return str(run.id)


def wait_run(
    api_url: str, run_id: str, log: Path, timeout_s: float = 400, auth: str | None = None
) -> State:
    """The flow run's state once it is final."""
    deadline = time.monotonic() + timeout_s
    with prefect_client(api_url, auth) as c:
        while time.monotonic() < deadline:
            state = c.read_flow_run(UUID(run_id)).state
            if state is not None and state.is_final():
                return state
            time.sleep(1.0)
    raise AssertionError(
        f"flow run {run_id} not ended after {timeout_s:.0f} s (state {state}); "
        f"worker log:\n{log.read_text()[-3000:]}"
    )
