"""A merge's run runs exactly its merge commit: the process deployment's pull step clones
the repository at the commit its flow run's trigger names (read from the Prefect API),
and the flow refuses a tree at any other commit, or with its files modified, before it
touches the cluster (its kubeconfig here does not exist: a run that got as far as the
cluster fails on that instead)."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
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
ROOT = Path(__file__).resolve().parents[2]


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


@pytest.fixture
def project_remote(tmp_path: Path) -> Path:
    """A bare remote whose main holds this project as the working tree has it, with a
    marker in flows/spec.py that the runner's copy lacks."""
    files = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    work, bare = tmp_path / "project", tmp_path / "project.git"
    for name in filter(None, files.split("\0")):
        if (ROOT / name).is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, work / name)
    with (work / "flows" / "spec.py").open("a") as spec:
        spec.write('\nCLONE_MARKER = "the merge\'s own"\n')
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "merge")
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    return bare


# As `prefect flow-run execute` runs a deployment's run: the pull step, imported from the
# runner's copy of the project, then the entry point loaded from the directory it returns.
_RUN_AS_PREFECT = """
import json, os, sys
from pathlib import Path
from flows.checkout import clone_run_commit
directory = clone_run_commit(sys.argv[1], parent=sys.argv[2])["directory"]
os.chdir(directory)
from prefect.flows import load_flow_from_entrypoint
load_flow_from_entrypoint("flows/handoff.py:handoff")
from flows.running_code import WrongCode, ensure_code
try:
    ensure_code(Path(directory), where="probe")
    refused = None
except WrongCode as exc:
    refused = str(exc)
spec = sys.modules["flows.spec"]
print(json.dumps({"spec": spec.__file__, "marker": hasattr(spec, "CLONE_MARKER"),
                  "directory": directory, "refused": refused}))
"""


def _run_as_prefect(bare: Path, tmp_path: Path) -> dict[str, object]:
    scratch = tmp_path / "runs"
    scratch.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT__FLOW_RUN_ID"}
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AS_PREFECT, str(bare), str(scratch)],
        cwd=ROOT,  # the runner's copy of the project, as the flow image's /opt/handoff
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_a_deployments_run_imports_the_merge_commits_modules_not_the_runners(
    project_remote: Path, tmp_path: Path
) -> None:
    loaded = _run_as_prefect(project_remote, tmp_path)
    assert loaded["marker"], loaded  # flows.spec as the merge holds it
    assert str(loaded["spec"]).startswith(str(loaded["directory"])), loaded
    assert loaded["refused"] is None, loaded


def test_a_merge_locked_to_other_dependencies_than_the_runners_is_refused(
    project_remote: Path, tmp_path: Path
) -> None:
    work = tmp_path / "relock"
    git(tmp_path, "clone", "-q", str(project_remote), str(work))
    lock = work / "uv.lock"
    httpx = importlib.metadata.version("httpx")
    text = lock.read_text()
    entry = f'name = "httpx"\nversion = "{httpx}"'
    assert entry in text
    lock.write_text(text.replace(entry, 'name = "httpx"\nversion = "0.0.1"'))
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "lock")
    git(work, "push", "-q", "origin", "HEAD:main")
    loaded = _run_as_prefect(project_remote, tmp_path)
    refused = str(loaded["refused"])
    assert f"httpx {httpx} installed, 0.0.1 locked" in refused, loaded
    assert "Nothing was written" in refused and "work-pool render" in refused, refused


def test_a_merge_run_of_the_project_with_another_copys_modules_is_refused(
    in_repo: SpecRepo, prefect: PrefectServer
) -> None:
    """A tree that holds the project's code (its flows/handoff.py) runs that code or
    nothing: this process imported the project from another copy."""
    merge = commit_files(
        in_repo.work, {"flows/handoff.py": "# the merge's flow\n"}, "the project's code"
    )
    failed, message = _run(_emit_merge(prefect, in_repo, merge, f"d-code-{merge[:8]}"))
    assert failed
    assert "must run the code of its commit" in message, message
    assert f"were imported from {ROOT}" in message, message
    assert "Nothing was written" in message and NO_CLUSTER not in message, message


def test_an_unknown_commit_leaves_the_branch_head_and_says_so(
    remote: tuple[Path, str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bare, _, head = remote
    with caplog.at_level(logging.ERROR, logger="prefect.handoff.checkout"):
        ran = clone_at(str(bare), branch="main", commit="a" * 40, into=tmp_path / "clone")
    assert ran == head
    assert any("a" * 40 in r.getMessage() and "refuse" in r.getMessage() for r in caplog.records)
