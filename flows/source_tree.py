"""What a handoff runs from: the commit of the tree holding its spec, and a digest of the
files that decide it (the spec, its candidate manifest, its parity golden file).

The digest names the content, whichever commit carried it: the reconciler compares the
branch head's digest with the one the Service's history recorded, and a merge's run
refuses a tree that is not the commit its trigger names (a stale or moved checkout, an
image built from another commit) before it writes anything. A tree without git (the
flow's image) names its commit in $HANDOFF_SOURCE_COMMIT, when it was built with it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import BaseModel

from flows.errors import PermanentError
from flows.running_code import code_root
from flows.spec import HandoffSpec

COMMIT_ENV = "HANDOFF_SOURCE_COMMIT"
# Set by the Kubernetes pool's template (flows/workpool.py) to the image it runs.
IMAGE_ENV = "HANDOFF_FLOW_IMAGE"
_GIT_TIMEOUT_S = 30.0


class WrongCommit(PermanentError):
    """A merge's run found its tree at another commit than the merge's."""


class SourceTree(BaseModel):
    """The audit record's account of what ran."""

    commit: str | None  # None: neither git nor $HANDOFF_SOURCE_COMMIT says
    modified: list[str] = []  # the handoff's files that differ from that commit
    digest: str  # sha256 over the handoff's files (see files_digest)
    files: list[str]  # relative to the repository root
    root: str  # the repository root the run read them from
    code: str | None = None  # the root the project's modules ran from (flows/running_code.py)
    image: str | None = None  # the flow image, by digest, where a pool's Job ran the run


def git(root: Path, *args: str) -> str | None:
    """git's stdout in root, or None when root is no work tree or git refuses."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def head_commit(root: Path) -> str | None:
    """The commit root's work tree has checked out, else $HANDOFF_SOURCE_COMMIT."""
    return git(root, "rev-parse", "--verify", "HEAD^{commit}") or os.environ.get(COMMIT_ENV)


def handoff_files(spec: HandoffSpec, spec_file: Path, root: Path) -> list[str]:
    """The files that decide a handoff, relative to root, as the relay's index names them."""
    golden = spec.gates.parity.golden if spec.gates.parity else None
    found = [spec_file, spec.candidate.manifest, *([golden] if golden else [])]
    return sorted({_relative(Path(f), root) for f in found})


def _relative(path: Path, root: Path) -> str:
    resolved = path.resolve()
    return (
        resolved.relative_to(root.resolve()).as_posix()
        if resolved.is_relative_to(root.resolve())
        else resolved.as_posix()
    )


def files_digest(paths: Iterable[str], read: Callable[[str], bytes | None]) -> str:
    """sha256 over each path and its bytes' sha256, in path order; a missing file counts
    as missing (so deleting a golden file changes the digest)."""
    total = hashlib.sha256()
    for path in sorted(set(paths)):
        content = read(path)
        part = "missing" if content is None else hashlib.sha256(content).hexdigest()
        total.update(f"{path}\0{part}\n".encode())
    return total.hexdigest()


def read_worktree(root: Path) -> Callable[[str], bytes | None]:
    def read(path: str) -> bytes | None:
        try:
            return (root / path).read_bytes()
        except OSError:
            return None

    return read


def read_commit(root: Path, commit: str) -> Callable[[str], bytes | None] | None:
    """Reads files as commit holds them; None when root's git does not know the commit."""
    if git(root, "cat-file", "-e", f"{commit}^{{commit}}") is None:
        return None

    def read(path: str) -> bytes | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), "show", f"{commit}:{path}"],
                capture_output=True,
                timeout=_GIT_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    return read


def source_tree(spec: HandoffSpec, spec_file: Path, root: Path) -> SourceTree:
    files = handoff_files(spec, spec_file, root)
    commit = head_commit(root)
    status = git(root, "status", "--porcelain", "--", *files) if commit else None
    # "XY path" per line (git() strips the first line's leading blank)
    modified = sorted({line[2:].strip() for line in (status or "").splitlines() if line.strip()})
    return SourceTree(
        commit=commit,
        modified=modified,
        digest=files_digest(files, read_worktree(root)),
        files=files,
        root=str(root),
        code=str(code_root()),
        image=os.environ.get(IMAGE_ENV),
    )


def ensure_commit(source: SourceTree, expected: str, *, where: str) -> None:
    """WrongCommit unless the tree is exactly the expected commit, unmodified."""
    if source.commit == expected and not source.modified:
        return
    observed = source.commit or f"unknown (no git work tree, no ${COMMIT_ENV})"
    changed = f", with {', '.join(source.modified)} modified" if source.modified else ""
    raise WrongCommit(
        f"{where}: this merge's run must run commit {expected}, but the tree it runs from "
        f"({source.root}) is at commit {observed}{changed}. Nothing was written "
        "to the cluster. The deployment's pull step checks the merge commit out "
        "(flows/checkout.py): check that the repository it clones holds that commit, or "
        "run `handoff reconcile` to hand off the branch head"
    )
