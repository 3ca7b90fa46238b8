"""The reconciler hands off a branch head whose merge never reached the relay: against
the sandbox's Services (their history annotations), the session's Prefect server (its
handoff runs and merge events) and a real spec repository. A head the history shows
handed off (recorded digest, or an older record's commit), one the gates turned down,
one with a run queued are left alone; the rest get one merge event each, however often
the reconciler runs; `handoff reconcile --dry-run` starts nothing, and `handoff history`
shows a reconciler's run as such."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client
from prefect import flow, get_client
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.reconcile import (
    MAX_ATTEMPTS,
    Head,
    ReconcileError,
    SeenRun,
    decide,
    reconcile,
)
from flows.report.history_view import listing
from flows.source_tree import files_digest, read_worktree
from flows.webhook.catchup import PassUnavailable, request_pass
from flows.webhook.events import MergeEvent, ReceivedMerge, read_merge_events, wait_persisted
from flows.webhook.settings import RelaySettings
from flows.webhook.specs import HandoffTarget, index_specs
from tests.webhook.deploy import (
    DEPLOYMENT,
    RECONCILER,
    deploy_all,
    models_repository,
    remove_deployments,
)
from tests.webhook.servers import PrefectServer, running_relay
from tests.webhook.specrepo import SpecRepo, commit_files, git, make_spec_repo, spec_files

SPECS = ("alpha", "beta", "gamma", "delta")
NO_CLUSTER = "/nonexistent/kubeconfig"  # the refusals come before the cluster


@pytest.fixture
def repo(tmp_path: Path, namespace: str, kube_api: Any) -> SpecRepo:
    """Four specs in the test's namespace, one Service each (no history yet)."""
    tag = uuid.uuid4().hex[:6]
    services = {n: f"{n}-{tag}" for n in SPECS}
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    git(work, "config", "user.email", "dev@example.invalid")
    git(work, "config", "user.name", "dev")
    files: dict[str, str] = {}
    for name in SPECS:
        files.update(spec_files(name, namespace, services[name]))
    commit_files(work, files, "initial layout")
    core = client.CoreV1Api(kube_api)
    for service in services.values():
        core.create_namespaced_service(
            namespace,
            {
                "metadata": {"name": service},
                "spec": {"selector": {"app": service}, "ports": [{"port": 80}]},
            },
        )
    return SpecRepo(work=work, namespace=namespace, services=services)


@pytest.fixture
def api(prefect: PrefectServer) -> Iterator[str]:
    with temporary_settings({PREFECT_API_URL: prefect.api_url}):
        yield prefect.api_url


def _target(repo: SpecRepo, name: str) -> HandoffTarget:
    return next(t for t in index_specs(repo.specs_dir, repo.work).targets if t.name == name)


def _record(repo: SpecRepo, name: str, **fields: Any) -> dict[str, Any]:
    return {
        "handoff_id": f"{name}-{uuid.uuid4().hex[:6]}",
        "spec": name,
        "namespace": repo.namespace,
        "service": repo.services[name],
        "outcome": "done",
        "started_at": "2026-12-01T10:00:00Z",
        "finished_at": "2026-12-01T10:05:00Z",
        **fields,
    }


def _set_history(kube_api: Any, repo: SpecRepo, name: str, entries: list[dict[str, Any]]) -> None:
    client.CoreV1Api(kube_api).patch_namespaced_service(
        repo.services[name],
        repo.namespace,
        {"metadata": {"annotations": {"handoff.dev/history": json.dumps(entries)}}},
    )


@pytest.fixture
def queued(api: str) -> Iterator[Callable[[str], str]]:
    """Queue a handoff run of a spec, as a merge's trigger leaves it before a worker takes
    it; deleted afterwards (the session's Prefect is shared)."""

    @flow(name="handoff")
    def handoff(spec_file: str, trigger: dict[str, str] | None = None) -> None: ...

    made: list[uuid.UUID] = []

    def queue(name: str) -> str:
        with get_client(sync_client=True) as prefect:
            run = prefect.create_flow_run(
                handoff, parameters={"spec_file": f"manifests/handoffs/{name}.yaml", "trigger": {}}
            )
        made.append(run.id)
        return str(run.id)

    yield queue
    with get_client(sync_client=True) as prefect:
        for run_id in made:
            prefect.delete_flow_run(run_id)


def _reconciler_merges(api: str, repo: SpecRepo, name: str) -> list[ReceivedMerge]:
    wait_persisted(api)
    merges = read_merge_events(api, namespace=repo.namespace, service=repo.services[name])
    return [m for m in merges if m.merge.source == "reconciler"]


def test_the_reconciler_starts_each_head_never_handed_off_once(
    repo: SpecRepo, api: str, kube_api: Any, sandbox: Any
) -> None:
    head = git(repo.work, "rev-parse", "HEAD").strip()
    alpha = _target(repo, "alpha")
    digest = files_digest(alpha.paths, read_worktree(repo.work))
    # alpha: handed off, as this code records it (the files' digest)
    _set_history(
        kube_api,
        repo,
        "alpha",
        [_record(repo, "alpha", source={"digest": digest, "files": sorted(alpha.paths)})],
    )
    # beta: handed off by a record that names only its merge commit; then main moved on
    # without touching beta's files
    _set_history(kube_api, repo, "beta", [_record(repo, "beta", trigger={"merge_commit": head})])
    # gamma: its head was turned down by the parity gate
    _set_history(
        kube_api,
        repo,
        "gamma",
        [
            _record(
                repo,
                "gamma",
                outcome="rolled-back",
                gates={"smoke": "pass", "parity": "fail"},
                trigger={"merge_commit": head},
            )
        ],
    )
    # delta: nothing recorded: its merge never arrived
    head = commit_files(repo.work, {"README.md": "# models, moved on\n"}, "docs only")
    kubeconfig = str(sandbox.kubeconfig)

    dry = reconcile(specs=repo.specs_dir, kubeconfig=kubeconfig, api_url=api, dry_run=True)
    assert {d.spec: d.action for d in dry} == {
        "alpha": "skip",
        "beta": "skip",
        "gamma": "skip",
        "delta": "start",
    }, [d.model_dump() for d in dry]
    assert "gates turned the head down" in next(d.reason for d in dry if d.spec == "gamma")
    assert not any(d.started for d in dry) and _reconciler_merges(api, repo, "delta") == []

    first = reconcile(specs=repo.specs_dir, kubeconfig=kubeconfig, api_url=api)
    second = reconcile(specs=repo.specs_dir, kubeconfig=kubeconfig, api_url=api)
    [started] = [d for d in first if d.started]
    assert started.spec == "delta" and not any(d.started for d in second)
    assert "waits for its run" in next(d.reason for d in second if d.spec == "delta")
    [event] = _reconciler_merges(api, repo, "delta")
    assert (event.merge.merge_commit, event.merge.spec_file) == (
        head,
        "manifests/handoffs/delta.yaml",
    )
    assert event.merge.delivery_id == started.delivery_id


def test_a_queued_run_of_the_spec_holds_the_reconciler_back(
    repo: SpecRepo, api: str, sandbox: Any, queued: Callable[[str], str]
) -> None:
    run = queued("alpha")
    decisions = reconcile(
        specs=repo.specs_dir, kubeconfig=str(sandbox.kubeconfig), api_url=api, dry_run=True
    )
    alpha = next(d for d in decisions if d.spec == "alpha")
    assert alpha.action == "skip" and run in alpha.reason, alpha


def test_the_cli_dry_run_prints_what_it_would_start(
    repo: SpecRepo, prefect: PrefectServer, sandbox: Any
) -> None:
    result = subprocess.run(
        [
            *(sys.executable, "-m", "cli", "reconcile", "--dry-run", "--json"),
            *("--specs-dir", str(repo.specs_dir), "--kubeconfig", str(sandbox.kubeconfig)),
        ],
        env={**os.environ, "PREFECT_API_URL": prefect.api_url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    decisions = json.loads(result.stdout)
    assert {d["spec"]: (d["action"], d["started"]) for d in decisions} == {
        name: ("start", False) for name in SPECS
    }


# The decision alone, for what needs runs' states: a run the reconciler started that
# ended without a record is started again, up to MAX_ATTEMPTS; the relay's own event
# for the head, younger than its trigger's wait, is left to the trigger.

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
HEAD = Head(commit="9" * 40, committed_at=NOW, repository="o/models", branch="main")
TARGET = HandoffTarget(
    name="alpha",
    spec_file="manifests/handoffs/alpha.yaml",
    namespace="ns",
    service="svc",
    paths=frozenset({"manifests/handoffs/alpha.yaml"}),
)


def _decide(runs: list[SeenRun], merges: list[ReceivedMerge] = []) -> Any:  # noqa: B006
    return decide(
        TARGET,
        HEAD,
        head_digest="d",
        digest_of=lambda e: None,
        history=[],
        runs=runs,
        merges=merges,
        now=NOW,
    )


def _crashed(n: int) -> SeenRun:
    trigger = {"source": "reconciler", "merge_commit": HEAD.commit, "delivery_id": f"r-{n}"}
    return SeenRun(
        id=f"run-{n}",
        state="CRASHED",
        spec_file=TARGET.spec_file,
        spec="alpha",
        trigger=trigger,
    )


def test_a_reconciler_run_that_ended_without_a_record_is_started_again_a_few_times() -> None:
    again = _decide([_crashed(1)])
    assert again.action == "start" and again.delivery_id == f"reconciler-{'9' * 12}-2"
    given_up = _decide([_crashed(n) for n in range(MAX_ATTEMPTS)])
    assert given_up.action == "skip" and "handoff run" in given_up.reason


def test_the_relays_event_for_the_head_is_left_to_its_trigger() -> None:
    event = ReceivedMerge(
        id=uuid.uuid4(),
        occurred=NOW - dt.timedelta(seconds=30),
        merge=MergeEvent(
            spec="alpha",
            spec_file=TARGET.spec_file,
            namespace="ns",
            service="svc",
            delivery_id="forge-1",
            merge_commit=HEAD.commit,
            merged_at=NOW,
            repository="o/models",
            branch="main",
            source="forgejo",
            kind="push",
            changed=[],
        ),
    )
    assert _decide([], [event]).action == "skip"
    late = event.model_copy(update={"occurred": NOW - dt.timedelta(hours=1)})
    assert _decide([], [late]).action == "start"


def test_history_shows_a_reconciler_run_as_such() -> None:
    entry = {
        "handoff_id": "h1",
        "spec": "alpha",
        "outcome": "done",
        "trigger": {"source": "reconciler", "merge_commit": HEAD.commit},
        "finished_at": "2026-12-01T12:05:00Z",
    }
    assert "reconciler" in listing([entry], wide=True)


@pytest.mark.slow  # `prefect deploy --all` takes about a minute on two busy cores
def test_prefect_yaml_deploys_the_reconciler_on_its_schedule_and_the_merge_pull_step(
    prefect: PrefectServer, tmp_path: Path
) -> None:
    repository = models_repository(tmp_path)
    try:
        deploy_all(prefect.api_url, repository.bare)  # type: ignore[arg-type]
        with httpx.Client(timeout=30, headers=prefect.headers) as http:
            reconciler = http.get(f"{prefect.api_url}/deployments/name/{RECONCILER}").json()
            on_merge = http.get(f"{prefect.api_url}/deployments/name/{DEPLOYMENT}").json()
    finally:
        remove_deployments(prefect.api_url)
    [schedule] = reconciler["schedules"]
    assert schedule["schedule"]["interval"] == 600 and schedule["active"] is False
    assert reconciler["entrypoint"] == "flows/reconcile.py:reconcile_flow"
    [pull] = on_merge["pull_steps"]
    assert list(pull) == ["flows.checkout.clone_run_commit"], pull


def test_a_clone_behind_its_branch_is_refused(tmp_path: Path, api: str) -> None:
    origin = make_spec_repo(tmp_path / "origin", ["alpha"])
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin.work), str(clone))
    moved = commit_files(origin.work, {"README.md": "# moved on\n"}, "main moves on")
    stale = git(clone, "rev-parse", "HEAD").strip()
    with pytest.raises(ReconcileError) as refused:
        reconcile(specs=clone / "manifests" / "handoffs", kubeconfig=NO_CLUSTER, api_url=api)
    assert stale in str(refused.value) and moved in str(refused.value), refused.value


def test_a_process_that_starts_asks_for_one_pass(api: str) -> None:
    with get_client(sync_client=True) as prefect:
        flow_id = prefect.create_flow_from_name("handoff-reconcile")
        deployment = prefect.create_deployment(flow_id=flow_id, name="reconcile")
    try:
        first, second = request_pass(api), request_pass(api)
        assert first is not None and second is None  # the first pass is still scheduled
    finally:
        with get_client(sync_client=True) as prefect:
            prefect.delete_deployment(deployment)
    with pytest.raises(PassUnavailable, match=r"deploy prefect\.yaml"):
        request_pass(api)


def test_a_relay_started_with_reconcile_on_start_asks_for_one_pass(
    api: str, settings: RelaySettings
) -> None:
    """Deliveries sent while the relay was down are not sent again: once serving, it asks
    the reconciler to find them."""
    with get_client(sync_client=True) as prefect:
        flow_id = prefect.create_flow_from_name("handoff-reconcile")
        deployment = prefect.create_deployment(flow_id=flow_id, name="reconcile")
    try:
        catching_up = settings.model_copy(update={"reconcile_on_start": True})
        with running_relay(catching_up):
            deadline = time.monotonic() + 30
            while not _runs_of(deployment):
                assert time.monotonic() < deadline, "no reconcile pass asked for"
                time.sleep(0.2)
        with running_relay(catching_up):  # a second start while that pass is pending
            time.sleep(2.0)
        assert len(_runs_of(deployment)) == 1
    finally:
        with get_client(sync_client=True) as prefect:
            prefect.delete_deployment(deployment)


def _runs_of(deployment: Any) -> list[Any]:
    from prefect.client.schemas import filters

    with get_client(sync_client=True) as prefect:
        return prefect.read_flow_runs(
            deployment_filter=filters.DeploymentFilter(
                id=filters.DeploymentFilterId(any_=[deployment])
            )
        )
