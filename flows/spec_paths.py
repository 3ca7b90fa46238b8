"""Which spec files a handoff may read: only those under the repository's specs directory;
and which files a spec may name: only those in the repository holding it.

A merge's event names its spec file, and anyone who can post an event to Prefect could
name any file; so a run started by an event or a deployment reads a spec only when the
path, resolved (symlinks followed), lies under the specs directory: no `..`, no absolute
path elsewhere, no symlink out of it. The check reads no file, only the path.
"""

from __future__ import annotations

import os
from pathlib import Path

from flows.errors import PermanentError

SPECS_DIR_ENV = "HANDOFF_SPECS_DIR"
DEFAULT_SPECS_DIR = Path("manifests/handoffs")  # relative to the repository root (the cwd)
SUFFIXES = (".yaml", ".yml")
# What marks a repository's root: a git work tree, or the project (the flow's image copies
# the repository without its .git, pyproject.toml included).
REPOSITORY_MARKERS = (".git", "pyproject.toml")


class SpecRefused(PermanentError):
    """A spec file outside the specs directory was named; nothing was read."""


def specs_dir() -> Path:
    """The specs directory runs from events read from: $HANDOFF_SPECS_DIR, else
    manifests/handoffs of the working directory (a deployment's clone of the repository)."""
    return Path(os.environ.get(SPECS_DIR_ENV) or DEFAULT_SPECS_DIR).resolve()


def confine(spec_file: str, specs: Path) -> Path:
    """spec_file (relative to the working directory, or absolute) resolved, when it lies
    under specs; otherwise SpecRefused naming what was asked and what is allowed."""
    root = specs.resolve()

    def refuse(why: str) -> SpecRefused:
        return SpecRefused(
            f"spec file {spec_file!r} refused, nothing read: {why}; a run started by an "
            f"event or a deployment reads only *.yaml specs under {root} (set "
            f"{SPECS_DIR_ENV} to move it)"
        )

    if not spec_file or "\x00" in spec_file:
        raise refuse("empty, or holds a NUL byte")
    raw = Path(spec_file)
    if ".." in raw.parts:
        raise refuse("it names a parent directory ('..')")
    try:
        resolved = (raw if raw.is_absolute() else Path.cwd() / raw).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
        raise refuse(f"it cannot be resolved ({exc})") from None
    if not resolved.is_relative_to(root) or resolved == root:
        raise refuse(f"it resolves (symlinks followed) to {resolved}, outside the specs directory")
    if resolved.suffix not in SUFFIXES:
        raise refuse(f"it is not a {' or '.join(SUFFIXES)} file")
    if not resolved.is_file():
        raise refuse(f"{resolved} is not a file")
    return resolved


def spec_root(spec_file: Path) -> Path:
    """The directory every file a spec names must lie in: the repository holding the spec,
    the nearest directory above it (symlinks followed) with a .git or a pyproject.toml (a
    deployment's clone, the flow image's project directory); else, a spec in no repository,
    the spec's own directory."""
    folder = spec_file.resolve().parent
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in REPOSITORY_MARKERS):
            return candidate
    return folder
