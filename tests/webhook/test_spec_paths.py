"""A run started by an event reads only specs under the repository's specs directory:
`..`, an absolute path elsewhere and a symlink out of the directory are refused before
the file is read, and the refusal is logged; the relay never turns a symlinked spec into
an event for a file outside the directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.handoff import handoff
from flows.report.record import Trigger
from flows.spec_paths import SPECS_DIR_ENV
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import push_body, settled
from tests.webhook.servers import PrefectServer
from tests.webhook.specrepo import SpecRepo, bare_remote, commit_files, git
from tests.webhook.test_relay import merges

# Read as a spec, this is not YAML: a refusal that names the path, not the YAML, shows
# the path was checked before the file was read.
NOT_YAML = "name: [unclosed\n"
MERGE = Trigger(source="forgejo", delivery_id="d-spec-paths", merge_commit="e" * 40)


@pytest.fixture
def in_repo(spec_repo: SpecRepo, prefect: PrefectServer) -> Iterator[SpecRepo]:
    """Runs as a deployment does: in the repository's clone, against Prefect."""
    outside = spec_repo.work.parent / "outside"
    outside.mkdir()
    (outside / "evil.yaml").write_text(NOT_YAML)
    (spec_repo.work / "notes").mkdir()
    (spec_repo.work / "notes" / "evil.yaml").write_text(NOT_YAML)
    (spec_repo.specs_dir / "link.yaml").symlink_to(outside / "evil.yaml")
    (spec_repo.specs_dir / "inrepo.yaml").symlink_to(spec_repo.work / "notes" / "evil.yaml")
    cwd = Path.cwd()
    os.chdir(spec_repo.work)
    os.environ.pop(SPECS_DIR_ENV, None)
    try:
        with temporary_settings({PREFECT_API_URL: prefect.api_url}):
            yield spec_repo
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize(
    ("spec_file", "why"),
    [
        ("manifests/handoffs/../../notes/evil.yaml", "'..'"),
        ("../outside/evil.yaml", "'..'"),
        ("{outside}/evil.yaml", "outside the specs directory"),
        ("{work}/notes/evil.yaml", "outside the specs directory"),
        ("manifests/handoffs/link.yaml", "outside the specs directory"),
        ("manifests/handoffs/inrepo.yaml", "outside the specs directory"),
        ("/etc/passwd", "outside the specs directory"),
        ("manifests/handoffs", "outside the specs directory"),
        ("manifests/handoffs/missing.yaml", "is not a file"),
        ("manifests/handoffs/alpha.yaml\x00.txt", "NUL"),
    ],
)
def test_an_event_naming_a_spec_outside_the_specs_directory_is_refused(
    in_repo: SpecRepo, caplog: pytest.LogCaptureFixture, spec_file: str, why: str
) -> None:
    named = spec_file.format(outside=in_repo.work.parent / "outside", work=in_repo.work)
    state = handoff(spec_file=named, trigger=MERGE, return_state=True)
    assert state.is_failed(), state
    message = str(state.result(raise_on_failure=False))
    assert "refused, nothing read" in message and why in message, message
    assert "not valid YAML" not in message
    assert any("refused, nothing read" in r.getMessage() for r in caplog.records)


def test_an_event_naming_a_spec_inside_the_directory_gets_past_the_check(
    in_repo: SpecRepo,
) -> None:
    # no merge event backs this trigger: the run stops at the newest-merge check, after
    # the path check let it through (absolute or relative alike)
    for named in ("manifests/handoffs/alpha.yaml", str(in_repo.specs_dir / "beta.yaml")):
        state = handoff(spec_file=named, trigger=MERGE, return_state=True)
        assert state.is_cancelled(), state
        assert "not among the Service's merge events" in str(state.message)


def test_the_relay_emits_no_event_for_a_symlink_out_of_the_specs_directory(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    bare = bare_remote(spec_repo)
    before = git(spec_repo.work, "rev-parse", "HEAD").strip()
    alpha = (spec_repo.specs_dir / "alpha.yaml").read_text()
    commit_files(spec_repo.work, {"notes/alpha-copy.yaml": alpha}, "a spec outside specs")
    (spec_repo.specs_dir / "copy.yaml").symlink_to("../../notes/alpha-copy.yaml")
    git(spec_repo.work, "add", "manifests/handoffs/copy.yaml")
    git(spec_repo.work, "commit", "-q", "-m", "a link to it")
    after = git(spec_repo.work, "rev-parse", "HEAD").strip()
    git(spec_repo.work, "push", "-q", str(bare), "main")
    reply = settled(relay, push_body(["notes/alpha-copy.yaml"], after=after, before=before), SECRET)
    assert reply["outcome"] == "no-handoff", reply
    assert merges(prefect, spec_repo, "alpha") == []


def test_a_run_by_hand_reads_the_file_it_names(in_repo: SpecRepo) -> None:
    # no merge, no deployment: a person's own file is read (here: it is not YAML)
    state = handoff(spec_file="notes/evil.yaml", return_state=True)
    assert state.is_failed(), state
    assert "not valid YAML" in str(state.result(raise_on_failure=False))
