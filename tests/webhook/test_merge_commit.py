"""A merge's run runs exactly its merge commit: the process deployment's pull step clones
the repository at the commit its flow run's trigger names (read from the Prefect API),
and the flow refuses a tree at any other commit, or with its files modified, before it
touches the cluster (its kubeconfig here does not exist: a run that got as far as the
cluster fails on that instead)."""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prefect import flow, get_client
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.checkout import clone_at, clone_run_commit
from flows.handoff import handoff
from flows.report.record import Trigger
from flows.spec_paths import SPECS_DIR_ENV
from flows.webhook.events import MergeEvent, build_event, emit_events
from tests.webhook.servers import PrefectServer
from tests.webhook.specrepo import SpecRepo, commit_files, git

NO_CLUSTER = "/nonexistent/kubeconfig"


def _emit_merge(prefect: PrefectServer, repo: SpecRepo, commit: str, delivery: str) -> Trigger:
    """The relay's event for a merge of alpha at commit; the run's trigger."""
    merge = MergeEvent(
        spec="alpha",
        spec_file="manifests/handoffs/alpha.yaml",
        namespace=repo.namespace,
        service=repo.services["alpha"],
        delivery_id=delivery,
        merge_commit=commit,
        merged_at=dt.datetime.now(dt.UTC),
        repository="o/models",
        branch="main",
        source="forgejo",
        kind="push",
        changed=["manifests/handoffs/alpha.yaml"],
    )
    emit_events(prefect.api_url, [build_event(merge, occurred=dt.datetime.now(dt.UTC))])
    return Trigger(source="forgejo", delivery_id=delivery, merge_commit=commit)


def _edit_alpha(repo: SpecRepo, timeout_s: int) -> str:
    path = "manifests/handoffs/alpha.yaml"
    raw = yaml.safe_load((repo.work / path).read_text())
    raw["approval"] = {"timeout_s": timeout_s}
    return commit_files(repo.work, {path: yaml.safe_dump(raw)}, f"alpha: timeout {timeout_s}")


@pytest.fixture
def in_repo(spec_repo: SpecRepo, prefect: PrefectServer) -> Iterator[SpecRepo]:
    cwd = Path.cwd()
    os.chdir(spec_repo.work)
    os.environ.pop(SPECS_DIR_ENV, None)
    try:
        with temporary_settings({PREFECT_API_URL: prefect.api_url}):
            yield spec_repo
    finally:
        os.chdir(cwd)


def _run(trigger: Trigger) -> tuple[bool, str]:
    state = handoff(
        spec_file="manifests/handoffs/alpha.yaml",
        trigger=trigger,
        kubeconfig=NO_CLUSTER,
        return_state=True,
    )
    return state.is_failed(), str(state.result(raise_on_failure=False))


def test_a_merge_run_from_another_commit_is_refused_before_the_cluster(
    in_repo: SpecRepo, prefect: PrefectServer
) -> None:
    older = git(in_repo.work, "rev-parse", "HEAD").strip()
    merge = _edit_alpha(in_repo, 601)
    git(in_repo.work, "checkout", "-q", "--detach", older)  # a stale tree
    failed, message = _run(_emit_merge(prefect, in_repo, merge, f"d-stale-{merge[:8]}"))
    assert failed
    assert f"must run commit {merge}" in message and f"at commit {older}" in message, message
    assert "Nothing was written" in message and NO_CLUSTER not in message, message


def test_a_merge_run_with_its_files_modified_is_refused(
    in_repo: SpecRepo, prefect: PrefectServer
) -> None:
    merge = _edit_alpha(in_repo, 602)
    golden = in_repo.work / "manifests" / "golden" / "alpha.json"
    golden.write_text('{"edited": "by hand"}\n')
    failed, message = _run(_emit_merge(prefect, in_repo, merge, f"d-dirty-{merge[:8]}"))
    assert failed
    assert "manifests/golden/alpha.json modified" in message, message


def test_a_merge_run_at_its_commit_gets_past_the_check(
    in_repo: SpecRepo, prefect: PrefectServer
) -> None:
    merge = _edit_alpha(in_repo, 603)
    failed, message = _run(_emit_merge(prefect, in_repo, merge, f"d-ok-{merge[:8]}"))
    assert failed and "must run commit" not in message, message
    assert NO_CLUSTER in message, message  # it went on, to the cluster it was given


@pytest.fixture
def remote(spec_repo: SpecRepo) -> tuple[Path, str, str]:
    """A bare remote whose main moved past an earlier merge: (remote, merge, main's head)."""
    bare = spec_repo.work.parent / "models.git"
    merge = _edit_alpha(spec_repo, 604)
    head = _edit_alpha(spec_repo, 605)
    git(spec_repo.work.parent, "clone", "-q", "--bare", str(spec_repo.work), str(bare))
    return bare, merge, head


def test_the_pull_step_checks_out_the_commit_its_run_names(
    remote: tuple[Path, str, str],
    prefect: PrefectServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bare, merge, head = remote

    @flow(name="pull-step-probe")
    def probe(trigger: dict[str, str] | None = None) -> None: ...

    with temporary_settings({PREFECT_API_URL: prefect.api_url}):
        with get_client(sync_client=True) as client:
            merge_run = client.create_flow_run(
                probe, parameters={"trigger": {"merge_commit": merge}}
            )
            plain_run = client.create_flow_run(probe, parameters={})
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("PREFECT__FLOW_RUN_ID", str(merge_run.id))
        merged = Path(clone_run_commit(str(bare))["directory"])
        monkeypatch.setenv("PREFECT__FLOW_RUN_ID", str(plain_run.id))
        plain = Path(clone_run_commit(str(bare))["directory"])
    assert git(merged, "rev-parse", "HEAD").strip() == merge
    assert "timeout_s: 604" in (merged / "manifests/handoffs/alpha.yaml").read_text()
    assert git(plain, "rev-parse", "HEAD").strip() == head


def test_the_pull_step_clones_under_the_directory_it_is_given(
    remote: tuple[Path, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flow image's working directory is read-only: its deployment clones elsewhere."""
    bare, _, head = remote
    readonly, scratch = tmp_path / "image", tmp_path / "scratch"
    readonly.mkdir()
    scratch.mkdir()
    readonly.chmod(0o555)
    monkeypatch.chdir(readonly)
    monkeypatch.delenv("PREFECT__FLOW_RUN_ID", raising=False)
    cloned = Path(clone_run_commit(str(bare), parent=str(scratch))["directory"])
    assert cloned.parent == scratch and not list(readonly.iterdir())
    assert git(cloned, "rev-parse", "HEAD").strip() == head


def test_a_merge_locked_to_other_dependencies_than_the_runner_s_says_so(
    remote: tuple[Path, str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bare, _, _ = remote
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(bare), str(work))
    (work / "uv.lock").write_text("version = 1\n# another lock\n")
    git(work, "add", "uv.lock")
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "lock")
    git(work, "push", "-q", "origin", "HEAD:main")
    with caplog.at_level(logging.WARNING, logger="prefect.handoff.checkout"):
        into = tmp_path / "clone"
        clone_at(str(bare), branch="main", commit=None, into=into)
    said = [r.getMessage() for r in caplog.records if "uv.lock" in r.getMessage()]
    assert said and str(into / "uv.lock") in said[0] and "rebuild" in said[0], said


def test_an_unknown_commit_leaves_the_branch_head_and_says_so(
    remote: tuple[Path, str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bare, _, head = remote
    with caplog.at_level(logging.ERROR, logger="prefect.handoff.checkout"):
        ran = clone_at(str(bare), branch="main", commit="a" * 40, into=tmp_path / "clone")
    assert ran == head
    assert any("a" * 40 in r.getMessage() and "refuse" in r.getMessage() for r in caplog.records)
