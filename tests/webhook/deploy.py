"""prefect.yaml deployed for real: a models repository (a bare clone of this one) with
the post-receive hook, the relay, `prefect --no-prompt deploy --all` and a process
worker, all against one Prefect server; and the merges a person would push."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from flows.workpool import render_process_template
from sandbox import procs
from tests.webhook.servers import basic_auth
from tests.webhook.specrepo import REPO, SpecRepo, git, merge_and_push

POOL = "handoff-process"
# prefect.yaml's two pools, by type; the kubernetes type needs no prefect-kubernetes
# here (Prefect ships its default job template), only its worker in the cluster does
POOLS = {POOL: "process", "handoff-kubernetes": "kubernetes"}
DEPLOYMENT = "handoff/handoff-on-merge"
RECONCILER = "handoff-reconcile/reconcile"


def models_repository(root: Path) -> SpecRepo:
    """This repository's committed HEAD, as main of the models repo people merge into."""
    bare, work = root / "handoff.git", root / "work"
    git(root, "init", "-q", "--bare", "-b", "main", str(bare))
    git(REPO, "push", "-q", str(bare), "HEAD:refs/heads/main")
    git(root, "clone", "-q", str(bare), str(work))
    git(work, "config", "user.email", "dev@example.invalid")
    git(work, "config", "user.name", "dev")
    return SpecRepo(work=work, bare=bare, namespace="", services={})


def prefect_cli(api_url: str, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "prefect", *args],
        cwd=REPO,
        env={**os.environ, **(env or {}), "PREFECT_API_URL": api_url},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"prefect {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def deploy_all(api_url: str, repository: Path, *, auth: str | None = None) -> str:
    """Create the work pools and deploy prefect.yaml (auth: the `user:password` the
    server requires, else the suite's); the process deployment's id."""
    auth = auth or os.environ.get("PREFECT_API_AUTH_STRING")
    env = {"PREFECT_API_AUTH_STRING": auth} if auth else {}
    for pool, kind in POOLS.items():
        # Asked of the API: `prefect work-pool ls` cuts names to the terminal's width.
        known = httpx.get(f"{api_url}/work_pools/{pool}", headers=basic_auth(auth), timeout=30)
        if known.status_code == 404:
            with tempfile.TemporaryDirectory() as scratch:
                create = ["work-pool", "create", pool, "--type", kind]
                if kind == "process":  # as `handoff work-pool render-process` makes it
                    template = Path(scratch) / "process-pool.json"
                    template.write_text(json.dumps(render_process_template()))
                    create += ["--base-job-template", str(template)]
                prefect_cli(api_url, *create, env=env)
    env["HANDOFF_REPOSITORY"] = str(repository)
    prefect_cli(api_url, "--no-prompt", "deploy", "--all", env=env)
    response = httpx.get(
        f"{api_url}/deployments/name/{DEPLOYMENT}", headers=basic_auth(auth), timeout=30
    )
    response.raise_for_status()
    return str(response.json()["id"])


def remove_deployments(api_url: str, *, auth: str | None = None) -> None:
    """Deployments and their automations (automations outlive a deleted deployment).
    Each request on a connection of its own and tried up to three times: this is a
    test's teardown after minutes of runs on a loaded server, every step is idempotent,
    and a reset connection here left the test's deployments behind for the next."""
    limits = httpx.Limits(max_keepalive_connections=0)
    auth = auth or os.environ.get("PREFECT_API_AUTH_STRING")
    with httpx.Client(headers=basic_auth(auth), timeout=30, limits=limits) as http:

        def call(method: str, path: str, **kwargs: Any) -> httpx.Response:
            for attempt in range(3):
                try:
                    return http.request(method, f"{api_url}{path}", **kwargs)
                except httpx.TransportError:
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        for automation in call("POST", "/automations/filter", json={}).json():
            if automation["name"].startswith("handoff-on-merge"):
                call("DELETE", f"/automations/{automation['id']}")
        for name in (DEPLOYMENT, f"{DEPLOYMENT}-kubernetes", RECONCILER):
            response = call("GET", f"/deployments/name/{name}")
            if response.status_code == 200:
                call("DELETE", f"/deployments/{response.json()['id']}")


@contextmanager
def worker(api_url: str, env: dict[str, str], log: Path) -> Iterator[procs.ProcessRecord]:
    argv = [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL]
    worker_env = {**env, "PREFECT_API_URL": api_url, "PREFECT_WORKER_QUERY_SECONDS": "2"}
    record = procs.spawn("prefect-worker", argv, log, env=worker_env)
    try:
        yield record
    finally:
        procs.stop(record, grace_s=20)


def merge_spec_change(
    repo: SpecRepo, spec: str, edit: Callable[[dict[str, Any]], None], message: str
) -> tuple[str, str]:
    """Merge an edit of manifests/handoffs/<spec>.yaml into main and push it."""
    path = f"manifests/handoffs/{spec}.yaml"
    raw = yaml.safe_load((repo.work / path).read_text())
    edit(raw)
    return merge_and_push(repo, {path: yaml.safe_dump(raw)}, message)


def delivery_of_push(output: str) -> str:
    return output.split("delivery ")[1].split(":")[0]
