"""Changed files of a merged pull request, read from a local bare mirror of its repository.

Pull-request payloads name the merge commit but not the files. The relay keeps one
bare mirror per repository under its state directory, fetches the base branch from
the payload's clone URL and diffs: a merge commit against its first parent (exactly
what the merge brought in); a squash or rebase merge against the pull request's base
commit (three-dot: from their merge base), which can only over-report, never miss.
Fetching again is cheap and idempotent, so a redelivery does the same work.
"""

from __future__ import annotations

import re
from pathlib import Path

import git

from flows.webhook.payload import Merge


class MirrorError(RuntimeError):
    """The repository could not be fetched or the merge commit is not in it."""


def _mirror_path(mirror_dir: Path, repository: str) -> Path:
    return mirror_dir / (re.sub(r"[^A-Za-z0-9._-]", "_", repository) + ".git")


def changed_files(mirror_dir: Path, merge: Merge) -> frozenset[str]:
    """Paths the merge changed on its branch; fetches the branch into the mirror first."""
    if merge.clone_url is None:
        raise MirrorError(
            f"pull request merge {merge.merge_commit[:12]} of {merge.repository}: the payload "
            "has no repository.clone_url to fetch the files from; send push events instead"
        )
    path = _mirror_path(mirror_dir, merge.repository)
    repo = git.Repo(path) if path.exists() else git.Repo.init(path, bare=True, mkdir=True)
    refspec = f"+refs/heads/{merge.branch}:refs/heads/{merge.branch}"
    try:
        repo.git.fetch("--quiet", merge.clone_url, refspec)
        commit = repo.commit(merge.merge_commit)
        if len(commit.parents) == 1 and merge.base_commit:
            span = f"{merge.base_commit}...{commit.hexsha}"
        else:
            span = f"{commit.hexsha}^1..{commit.hexsha}"
        names = repo.git.diff("--name-only", span)
    except (git.GitCommandError, ValueError) as exc:
        raise MirrorError(
            f"cannot read the files of merge {merge.merge_commit[:12]} in {merge.repository} "
            f"(mirror {path}, fetched from {merge.clone_url}): {exc}; check that the relay can "
            "fetch that URL"
        ) from exc
    return frozenset(line for line in names.splitlines() if line)
