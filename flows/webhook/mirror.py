"""A merge as merged, read from a local bare mirror of its repository: its changed files
(pull-request payloads name the merge commit but not the files) and its specs directory
(the specs as merged, so a spec the merge itself adds is seen).

The relay fetches the branch into the mirror (see mirrors.py) from the URL source.py
picks, and diffs, never trusting a payload's file list (forges cap it): a push from its
`before` to its `after` (every commit it brought, listed in the payload or not); a
merged pull request's merge commit against its first parent (exactly what the merge
brought in), a squash or rebase merge against the pull request's base commit
(three-dot: from their merge base). Where that base is not in the mirror (a new branch,
a force push) every file of the merge counts as changed: over-reporting, never missing.
Fetching again is cheap and idempotent, so a retry does the same work. Every git
command shares the delivery's deadline (gitcmd.py); payload values reach git only after
`--`.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from flows.webhook.gitcmd import GitFailed, GitTimeout, clip, run_git
from flows.webhook.mirrors import MirrorBusy, MirrorPool
from flows.webhook.payload import Merge
from flows.webhook.source import NotFetchable, source_of


class MirrorError(RuntimeError):
    """The repository could not be fetched or the merge commit is not in it."""


class MirrorTimeout(MirrorError):
    """The git work of the delivery did not finish before its deadline."""


class MirrorRefused(MirrorError):
    """The relay will not fetch this merge from where its payload says (final)."""


class MissingCommit(MirrorError):
    """The fetch worked but the merge commit is not on the configured repository's branch."""


@dataclass(frozen=True)
class MergedCommit:
    """A merge commit fetched into the mirror, with its specs extracted under `tree`."""

    mirror: Path
    merge: Merge
    tree: Path
    deadline: float

    def changed_files(self) -> frozenset[str]:
        """Paths the merge changed on its branch."""
        sha, merge = self.merge.merge_commit, self.merge
        if merge.kind == "push":
            base = merge.before if merge.before and merge.before.strip("0") else None
            span = f"{base}..{sha}" if base and self._has(base) else None
        else:
            parents = self._git("rev-list", "--parents", "-n", "1", sha, "--").split()[1:]
            if len(parents) == 1 and merge.base_commit and self._has(merge.base_commit):
                span = f"{merge.base_commit}...{sha}"
            else:
                span = f"{parents[0]}..{sha}" if parents else None
        if span is None:  # nothing to diff against: every file of the commit
            names = self._git("ls-tree", "-r", "--name-only", sha, "--")
        else:
            names = self._git("diff", "--name-only", "--no-renames", span, "--")
        return frozenset(line for line in names.splitlines() if line)

    def _has(self, sha: str) -> bool:
        try:
            run_git(
                ["cat-file", "-e", f"{sha}^{{commit}}"], cwd=self.mirror, deadline=self.deadline
            )
        except GitTimeout as exc:
            raise MirrorTimeout(f"{self.merge.repository}: {exc}") from exc
        except GitFailed:
            return False
        return True

    def _git(self, *args: str) -> str:
        try:
            out = run_git(list(args), cwd=self.mirror, deadline=self.deadline)
        except GitTimeout as exc:
            raise MirrorTimeout(f"{self.merge.repository}: {exc}") from exc
        except GitFailed as exc:
            raise MirrorError(
                f"cannot diff merge {self.merge.merge_commit[:12]} of {self.merge.repository}: "
                f"{exc}"
            ) from exc
        return out.decode("utf-8", "replace")


@dataclass(frozen=True)
class Upstream:
    """Where merges may be fetched from (the relay's configuration)."""

    pool: MirrorPool
    clone_url: str | None
    clone_hosts: frozenset[str]


@contextmanager
def fetch_merge(
    upstream: Upstream, merge: Merge, specs: PurePosixPath, *, deadline: float
) -> Iterator[MergedCommit]:
    """Fetch the merge's branch into its mirror and extract the merge commit's specs
    directory (specs, relative to the repository root) into a temporary directory."""
    try:
        source = source_of(
            merge.clone_url, configured=upstream.clone_url, hosts=upstream.clone_hosts
        )
    except NotFetchable as exc:
        raise MirrorRefused(
            f"merge {merge.merge_commit[:12]} of {merge.repository} not fetched: {exc}"
        ) from None
    pool, sha = upstream.pool, merge.merge_commit
    refspec = f"+refs/heads/{merge.branch}:refs/heads/{merge.branch}"
    try:
        with pool.use(source.url, deadline=deadline) as path:
            if not (path / "HEAD").exists():
                run_git(
                    ["init", "--quiet", "--bare", "--", str(path)], cwd=pool.root, deadline=deadline
                )
            run_git(
                ["fetch", "--quiet", "--no-tags", "--", source.url, refspec],
                cwd=path,
                deadline=deadline,
                config=source.config,
            )
            _on_branch(path, sha, merge, deadline)
            archive = _archive(path, sha, specs, deadline)
            with tempfile.TemporaryDirectory(prefix="handoff-merge-") as tmp:
                _extract(archive, Path(tmp), merge)
                yield MergedCommit(path, merge, Path(tmp), deadline)
    except (GitTimeout, MirrorBusy) as exc:
        raise MirrorTimeout(
            f"cannot read merge {sha[:12]} of {merge.repository} in time (from "
            f"{clip(source.url, 200)}): {exc}; the relay tries again"
        ) from exc
    except GitFailed as exc:
        raise MirrorError(
            f"cannot read merge {sha[:12]} of {merge.repository} (fetched from "
            f"{clip(source.url, 200)}): {exc}; check that the relay can fetch that URL"
        ) from exc


def _on_branch(mirror: Path, sha: str, merge: Merge, deadline: float) -> None:
    """MissingCommit unless sha is on the fetched branch (a commit of another repository,
    or one not yet replicated to the configured URL, is not)."""
    try:
        run_git(
            ["merge-base", "--is-ancestor", sha, f"refs/heads/{merge.branch}"],
            cwd=mirror,
            deadline=deadline,
        )
    except GitTimeout:
        raise
    except GitFailed as exc:
        raise MissingCommit(
            f"merge {sha[:12]} of {merge.repository} is not on branch {merge.branch} of the "
            f"repository the relay fetched ({clip(str(exc), 200)})"
        ) from None


def _archive(mirror: Path, sha: str, specs: PurePosixPath, deadline: float) -> bytes:
    """The specs directory at sha as a tar (empty when the commit has none)."""
    tree = run_git(["ls-tree", "--name-only", sha, "--", str(specs)], cwd=mirror, deadline=deadline)
    if not tree.strip():
        return _empty_tar()
    return run_git(
        ["archive", "--format=tar", sha, "--", str(specs)], cwd=mirror, deadline=deadline
    )


def _empty_tar() -> bytes:
    buffer = io.BytesIO()
    tarfile.open(fileobj=buffer, mode="w").close()
    return buffer.getvalue()


def _extract(archive: bytes, into: Path, merge: Merge) -> None:
    """Unpack the specs; a link out of the tree or any other unsafe member is refused."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise MirrorError(
            f"cannot unpack the specs of merge {merge.merge_commit[:12]} of "
            f"{merge.repository}: {clip(str(exc))}"
        ) from exc
