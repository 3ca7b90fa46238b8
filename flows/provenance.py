"""Does an image's source revision contain the required fix commits?

Works in a local mirror of the source repository (``git clone --mirror`` into a cache,
fetched again when a revision or commit is not there yet). A required commit counts as
present when it is an ancestor of the revision, or when a commit reachable from the
revision but not from the required commit has the same ``git patch-id --stable`` (the
fix reached that branch as a cherry-pick); the evidence says which. Git failures are
mapped to ``flows.errors`` here.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, cast

import git
from pydantic import BaseModel, ConfigDict

from flows.errors import FixMissing, SourceUnavailable, UnknownCommit


class FixEvidence(BaseModel):
    """How one required commit was found in the image's revision."""

    model_config = ConfigDict(frozen=True)

    commit: str  # the required commit, full id
    found: Literal["ancestor", "cherry-pick"]
    matching_commit: str  # the commit in the revision's history carrying the change
    summary: str  # first line of the required commit's message


def default_cache_root() -> Path:
    """``$HANDOFF_GIT_CACHE``, else ``~/.cache/handoff/git``."""
    if "HANDOFF_GIT_CACHE" in os.environ:
        return Path(os.environ["HANDOFF_GIT_CACHE"])
    return Path.home() / ".cache" / "handoff" / "git"


def open_mirror(source: str, *, cache_root: Path | None = None) -> git.Repo:
    """The mirror of ``source`` (URL or path), cloned on first use."""
    root = cache_root or default_cache_root()
    name = re.sub(r"[^A-Za-z0-9]+", "-", source.rstrip("/").rsplit("/", 1)[-1]).strip("-")
    path = root / f"{name}-{hashlib.sha256(source.encode()).hexdigest()[:12]}.git"
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        _git_or_raise(lambda: git.Repo.clone_from(source, partial, mirror=True), source, "clone")
        partial.rename(path)  # atomic: a crash never leaves a half mirror under the real name
    return git.Repo(path)


def find_fixes(
    repo: git.Repo, revision: str, requires: Sequence[str], *, source: str
) -> list[FixEvidence]:
    """Evidence for every required commit, or ``FixMissing`` naming the first absent one."""
    required = resolve_commits(repo, requires, source=source, what="required commit")
    [head] = resolve_commits(repo, [revision], source=source, what="image revision")
    evidence = []
    for commit in required:
        found = _find_one(repo, head, commit)
        if found is None:
            raise FixMissing(
                f"revision {head} of {source} does not contain required commit {commit} "
                f"({_summary(repo, commit)!r}): not an ancestor and no cherry-pick with the "
                "same patch-id. Wait for CI to publish an image built after the fix."
            )
        evidence.append(found)
    return evidence


def resolve_commits(
    repo: git.Repo, revs: Sequence[str], *, source: str, what: str = "commit"
) -> list[str]:
    """Full ids of ``revs``, fetching the mirror once if any is unknown."""
    ids = [_resolve(repo, rev) for rev in revs]
    if None in ids:
        _git_or_raise(lambda: repo.git.remote("update", "--prune"), source, "fetch")
        ids = [_resolve(repo, rev) for rev in revs]
    missing = [rev for rev, full in zip(revs, ids, strict=True) if full is None]
    if missing:
        raise UnknownCommit(
            f"{what} {', '.join(missing)} not found in source repository {source}, even "
            "after a fetch; expected a commit of that repository. Check the id, or that the "
            "image was built from this repository."
        )
    return [full for full in ids if full is not None]


def _find_one(repo: git.Repo, head: str, commit: str) -> FixEvidence | None:
    summary = _summary(repo, commit)
    # GitPython annotates Commits but takes any rev: it hands both to git merge-base
    if repo.is_ancestor(cast("git.Commit", commit), cast("git.Commit", head)):
        return FixEvidence(commit=commit, found="ancestor", matching_commit=commit, summary=summary)
    wanted = _patch_ids(repo, [commit, "-1"]).get(commit)
    for candidate, patch_id in _patch_ids(repo, [head, f"^{commit}"]).items():
        if wanted is not None and patch_id == wanted:
            return FixEvidence(
                commit=commit, found="cherry-pick", matching_commit=candidate, summary=summary
            )
    return None


def _patch_ids(repo: git.Repo, log_args: list[str]) -> dict[str, str]:
    """``{commit: patch-id}`` for the non-merge commits ``git log`` selects."""
    git_dir = str(repo.git_dir)
    log = subprocess.run(
        ["git", "--git-dir", git_dir, "log", "-p", "--no-merges", *log_args],
        capture_output=True,
        check=True,
    ).stdout
    out = subprocess.run(
        ["git", "--git-dir", git_dir, "patch-id", "--stable"],
        input=log,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return {c: p for p, c in (line.split() for line in out.splitlines() if line.strip())}


def _resolve(repo: git.Repo, rev: str) -> str | None:
    # rev-parse --verify, not repo.commit(): the latter accepts any 40-hex id unchecked.
    try:
        return str(
            repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
        )
    except git.GitCommandError:
        return None


def _summary(repo: git.Repo, commit: str) -> str:
    return str(repo.commit(commit).summary)


def _git_or_raise(action: Callable[[], object], source: str, verb: str) -> object:
    try:
        return action()
    except git.GitCommandError as exc:
        raise SourceUnavailable(
            f"could not {verb} source repository {source}: {exc.stderr.strip() or exc}; "
            "check the URL/path and the credentials for it."
        ) from exc
