"""A merge as merged, read from a local bare mirror of its repository: its changed files
(pull-request payloads name the merge commit but not the files) and its whole tree (the
specs as merged, so a spec the merge itself adds is seen).

The relay keeps one bare mirror per repository under its state directory, fetches the
branch from the payload's clone URL and diffs: a merge commit against its first parent (exactly
what the merge brought in); a squash or rebase merge against the pull request's base
commit (three-dot: from their merge base), which can only over-report, never miss.
Fetching again is cheap and idempotent, so a redelivery does the same work.
"""

from __future__ import annotations

import io
import re
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import git

from flows.webhook.payload import Merge


class MirrorError(RuntimeError):
    """The repository could not be fetched or the merge commit is not in it."""


def _mirror_path(mirror_dir: Path, repository: str) -> Path:
    return mirror_dir / (re.sub(r"[^A-Za-z0-9._-]", "_", repository) + ".git")


@dataclass(frozen=True)
class MergedCommit:
    """A merge commit fetched into the mirror, with its files extracted at `tree`."""

    repo: git.Repo
    commit: git.Commit
    merge: Merge
    tree: Path

    def changed_files(self) -> frozenset[str]:
        """Paths the merge changed on its branch."""
        commit, merge = self.commit, self.merge
        if len(commit.parents) == 1 and merge.base_commit:
            span = f"{merge.base_commit}...{commit.hexsha}"
        else:
            span = f"{commit.hexsha}^1..{commit.hexsha}"
        try:
            names = self.repo.git.diff("--name-only", span)
        except git.GitCommandError as exc:
            raise MirrorError(
                f"cannot diff merge {commit.hexsha[:12]} of {merge.repository} ({span}): {exc}"
            ) from exc
        return frozenset(line for line in names.splitlines() if line)


@contextmanager
def fetch_merge(mirror_dir: Path, merge: Merge) -> Iterator[MergedCommit]:
    """Fetch the merge's branch into the mirror and extract the merge commit's files into a
    temporary directory for the block."""
    if merge.clone_url is None:
        raise MirrorError(
            f"merge {merge.merge_commit[:12]} of {merge.repository}: the payload has no "
            "repository.clone_url to fetch it from; send push events, which list their files"
        )
    path = _mirror_path(mirror_dir, merge.repository)
    repo = git.Repo(path) if path.exists() else git.Repo.init(path, bare=True, mkdir=True)
    refspec = f"+refs/heads/{merge.branch}:refs/heads/{merge.branch}"
    try:
        # never wait for a password prompt: a relay has no terminal
        repo.git.fetch("--quiet", merge.clone_url, refspec, env={"GIT_TERMINAL_PROMPT": "0"})
        commit = repo.commit(merge.merge_commit)
        archive = repo.git.archive("--format=tar", commit.hexsha, stdout_as_string=False)
    except (git.GitCommandError, ValueError) as exc:
        raise MirrorError(
            f"cannot read merge {merge.merge_commit[:12]} of {merge.repository} (mirror "
            f"{path}, fetched from {merge.clone_url}): {exc}; check that the relay can fetch "
            "that URL"
        ) from exc
    with tempfile.TemporaryDirectory(prefix="handoff-merge-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield MergedCommit(repo, commit, merge, Path(tmp))
