"""A merge as merged, read from a local bare mirror of its repository: its changed files
(pull-request payloads name the merge commit but not the files) and its specs directory
(the specs as merged, so a spec the merge itself adds is seen).

The relay fetches the branch into the mirror (see mirrors.py) from the URL source.py
picks, and diffs: a merge commit against its first parent (exactly what the merge
brought in); a squash or rebase merge against the pull request's base commit
(three-dot: from their merge base), which can only over-report, never miss. Fetching
again is cheap and idempotent, so a redelivery does the same work. Every git command
shares the delivery's deadline (gitcmd.py); payload values reach git only after `--`.
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
        parents = self._git("rev-list", "--parents", "-n", "1", sha, "--").split()[1:]
        if len(parents) == 1 and merge.base_commit:
            span = f"{merge.base_commit}...{sha}"
        elif parents:
            span = f"{parents[0]}..{sha}"
        else:
            return frozenset()
        names = self._git("diff", "--name-only", "--no-renames", span, "--")
        return frozenset(line for line in names.splitlines() if line)

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
        raise MirrorError(
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
            run_git(["cat-file", "-e", f"{sha}^{{commit}}"], cwd=path, deadline=deadline)
            archive = _archive(path, sha, specs, deadline)
            with tempfile.TemporaryDirectory(prefix="handoff-merge-") as tmp:
                _extract(archive, Path(tmp), merge)
                yield MergedCommit(path, merge, Path(tmp), deadline)
    except (GitTimeout, MirrorBusy) as exc:
        raise MirrorTimeout(
            f"cannot read merge {sha[:12]} of {merge.repository} in time (from "
            f"{clip(source.url, 200)}): {exc}; the forge's retry will try again"
        ) from exc
    except GitFailed as exc:
        raise MirrorError(
            f"cannot read merge {sha[:12]} of {merge.repository} (fetched from "
            f"{clip(source.url, 200)}): {exc}; check that the relay can fetch that URL"
        ) from exc


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
