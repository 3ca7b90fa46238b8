"""A required commit is found in a revision as an ancestor or, failing that, as a
cherry-pick with the same patch-id (and the evidence says which); an absent fix, an
unknown revision and an unreachable source each fail with their own error; a stale
mirror is fetched before a commit is declared unknown."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from flows.errors import FixMissing, SourceUnavailable, UnknownCommit
from flows.provenance import find_fixes, open_mirror
from sandbox.srcrepo import (
    SourceRepo,
    cherry_pick,
    commit_files,
    commit_gdn_fix,
    create_candle_vllm_repo,
)


def _mirror(source: SourceRepo, tmp_path: Path) -> git.Repo:
    return open_mirror(str(source.path), cache_root=tmp_path / "cache")


def test_fix_as_ancestor(source: SourceRepo, tmp_path: Path) -> None:
    later = commit_files(git.Repo(source.path), {"NOTES": "after the fix\n"}, "docs: notes")
    fix = source.commits["fix"]
    [evidence] = find_fixes(_mirror(source, tmp_path), later, [fix[:10]], source="src")
    assert (evidence.commit, evidence.found, evidence.matching_commit) == (fix, "ancestor", fix)
    assert "keeps the key channel band" in evidence.summary


def test_fix_as_cherry_pick(source: SourceRepo, tmp_path: Path) -> None:
    fix = source.commits["fix"]
    picked = cherry_pick(git.Repo(source.path), fix, branch="release/sm70",
                         onto=source.commits["ci"])  # fmt: skip
    [evidence] = find_fixes(_mirror(source, tmp_path), picked, [fix], source="src")
    assert (evidence.found, evidence.matching_commit) == ("cherry-pick", picked)


def test_fix_missing_names_revision_and_commit(source: SourceRepo, tmp_path: Path) -> None:
    before, fix = source.commits["gptq"], source.commits["fix"]
    with pytest.raises(FixMissing, match=rf"revision {before} of src does not contain .*{fix}"):
        find_fixes(_mirror(source, tmp_path), before, [fix], source="src")


@pytest.mark.parametrize("revision", ["0" * 40, "not-a-commit"])
def test_unknown_revision(source: SourceRepo, tmp_path: Path, revision: str) -> None:
    with pytest.raises(UnknownCommit, match=rf"image revision {revision} not found in .*src"):
        find_fixes(_mirror(source, tmp_path), revision, [source.commits["fix"]], source="src")


def test_unknown_required_commit(source: SourceRepo, tmp_path: Path) -> None:
    with pytest.raises(UnknownCommit, match=r"required commit deadbeef not found"):
        find_fixes(_mirror(source, tmp_path), "HEAD", ["deadbeef"], source="src")


def test_stale_mirror_is_fetched(tmp_path: Path) -> None:
    """The mirror was cloned before the fix existed; the check must fetch, not fail."""
    source = create_candle_vllm_repo(tmp_path / "candle-vllm", with_fix=False)
    mirror = _mirror(source, tmp_path)
    fix = commit_gdn_fix(git.Repo(source.path))
    [evidence] = find_fixes(mirror, fix, [fix], source="src")
    assert evidence.found == "ancestor"
    assert open_mirror(str(source.path), cache_root=tmp_path / "cache").git_dir == mirror.git_dir


def test_unreachable_source(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match=r"could not clone source repository .*nowhere"):
        open_mirror(str(tmp_path / "nowhere"), cache_root=tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())  # no half-made mirror left behind
