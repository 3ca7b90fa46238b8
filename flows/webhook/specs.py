"""Which handoffs a merge affects: its changed files against the specs' own files.

A handoff is affected when the merge changed its spec file, its candidate manifest
or its parity golden file. Paths are compared relative to the repository root, as
forges report them. Specs are read on every delivery (a few small YAML files): from the
merge commit itself when the relay can fetch it (see `mirror.fetch_merge`), else from
the relay's checkout.
"""

from __future__ import annotations

from pathlib import Path

import git
from pydantic import BaseModel, ConfigDict

from flows.spec import SpecError, load_spec
from flows.spec_paths import SpecRefused, confine


class HandoffTarget(BaseModel):
    """One handoff spec and the repository paths that trigger it."""

    model_config = ConfigDict(frozen=True)

    name: str
    spec_file: str  # relative to the repository root, as the flow run is given it
    namespace: str
    service: str
    paths: frozenset[str]


class SpecIndex(BaseModel):
    targets: list[HandoffTarget]
    errors: list[str]  # specs that could not be read, named with why

    def affected(self, changed: frozenset[str]) -> list[HandoffTarget]:
        return [t for t in self.targets if t.paths & changed]


def find_repo_root(specs_dir: Path) -> Path:
    """The git work tree holding specs_dir, else its grandparent (manifests/handoffs/..)."""
    try:
        root = git.Repo(specs_dir, search_parent_directories=True).working_tree_dir
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        root = None
    return Path(root) if root else specs_dir.resolve().parent.parent


def _relative(path: Path, root: Path) -> str | None:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:  # outside the repository: no merge can change it
        return None


def index_specs(specs_dir: Path, repo_root: Path) -> SpecIndex:
    """Read every spec in specs_dir; a broken spec is reported, never fatal."""
    root, targets, errors = repo_root.resolve(), [], []
    for found in sorted([*specs_dir.glob("*.yaml"), *specs_dir.glob("*.yml")]):
        try:  # a symlink out of the specs directory is never read, as the flow would not
            path = confine(str(found.absolute()), specs_dir)
            spec = load_spec(path, root=root)
        except (SpecError, SpecRefused) as exc:
            errors.append(str(exc))
            continue
        golden = spec.gates.parity.golden if spec.gates.parity else None
        files = [path, spec.candidate.manifest, *([golden] if golden else [])]
        relative = [r for r in (_relative(f, root) for f in files) if r]
        spec_file = _relative(path, root)
        if spec_file is None:
            errors.append(f"{path} is outside the repository root {root}: set --repo-root")
            continue
        targets.append(
            HandoffTarget(
                name=spec.name,
                spec_file=spec_file,
                namespace=spec.namespace,
                service=spec.service,
                paths=frozenset(relative),
            )
        )
    return SpecIndex(targets=targets, errors=errors)
