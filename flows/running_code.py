"""Which code a run runs: the project's modules and the dependencies installed for them.

A deployment's pull step clones the merge commit and Prefect then loads the flow's entry
point from that clone; but the pull step itself was imported from the runner's own copy of
the project (the flow image's /opt/handoff, the process worker's checkout), and every
`flows.*` module the entry point imports would resolve to that copy, already in
`sys.modules`. `load_from` makes the clone's modules the ones imported; `ensure_code`
refuses a merge's run whose modules, or whose installed dependencies, are not its
commit's.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from flows.errors import PermanentError

# The project's top-level packages (pyproject.toml's wheel packages).
PACKAGES = ("cli", "flows", "gates", "ociclient", "retrypolicy", "sandbox", "yamlfile")
# The file that marks a tree as the project's own (not a repository of specs alone).
ENTRY = Path("flows") / "handoff.py"


class WrongCode(PermanentError):
    """A merge's run would run modules or dependencies other than its commit's."""


def _ours(module_name: str) -> bool:
    return module_name.split(".", 1)[0] in PACKAGES


def _project_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if _ours(name) and origin:
            found[name] = Path(origin).resolve()
    return found


def load_from(root: Path) -> None:
    """From now on, import the project's modules from root: forget those already imported
    (the pull step's own, from the runner's copy) and put root first on the path."""
    for name in [n for n in sys.modules if _ours(n)]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()


def code_root() -> Path:
    """The root the running `flows` package was imported from."""
    return Path(__file__).resolve().parents[1]


def foreign_modules(root: Path) -> dict[str, Path]:
    """The project's imported modules that do not come from root, by the root (the parent
    of their top-level package) each came from."""
    base = root.resolve()
    return {
        name: path.parents[len(name.split(".")) - (path.name != "__init__.py")]
        for name, path in sorted(_project_modules().items())
        if not path.is_relative_to(base)
    }


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


Entry = dict[str, Any]


def lock_mismatches(lock: Path) -> list[str]:
    """What the installed distributions lack of `lock` (uv.lock): each package the project
    runs with (its dependencies and those of the extras it has installed, not the
    development tools) installed at a version the lock does not name, and each of its own
    unconditional dependencies not installed. Empty: the lock is installed."""
    try:
        packages: list[Entry] = tomllib.loads(lock.read_text()).get("package", [])
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return [f"{lock} is unreadable ({exc})"]
    installed: dict[str, str] = {}
    for dist in importlib.metadata.distributions():  # in path order: the one imported first
        if dist.metadata["Name"]:
            installed.setdefault(_normal(dist.metadata["Name"]), dist.version)
    project = next((p for p in packages if _is_project(p)), {})
    locked: dict[str, set[str]] = {}
    for package in packages:
        if package is not project and package.get("version") is not None:
            locked.setdefault(_normal(package["name"]), set()).add(str(package["version"]))
    runs_with = _reachable(packages, project, installed)
    wrong = [
        f"{name} {version} installed, {' or '.join(sorted(locked[name]))} locked"
        for name, version in sorted(installed.items())
        if name in runs_with and name in locked and version not in locked[name]
    ]
    direct = project.get("dependencies", [])
    missing = [
        f"{name} not installed, {' or '.join(sorted(locked.get(name, {'?'})))} locked"
        # one with a marker may be another platform's: only an unconditional one must be
        for name in sorted({_normal(d["name"]) for d in direct if "marker" not in d})
        if name not in installed
    ]
    return wrong + missing


def _is_project(package: Entry) -> bool:
    source = package.get("source", {})
    return bool(source.get("editable") == "." or source.get("virtual") == ".")


def _reachable(packages: list[Entry], project: Entry, installed: dict[str, str]) -> set[str]:
    """The names the project's dependencies reach in the lock, through the extras each
    dependency asks for, starting from its own extras that are installed."""
    by_name: dict[str, list[Entry]] = {}
    for package in packages:
        by_name.setdefault(_normal(package["name"]), []).append(package)
    queue: list[Entry] = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        if any(_normal(d["name"]) in installed for d in extra):
            queue += extra
    seen: set[tuple[str, tuple[str, ...]]] = set()
    while queue:
        wanted = queue.pop()
        name, extras = _normal(wanted["name"]), tuple(wanted.get("extra", ()))
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for package in by_name.get(name, []):
            queue += package.get("dependencies", [])
            for extra_name in extras:
                queue += package.get("optional-dependencies", {}).get(extra_name, [])
    return {name for name, _ in seen}


def ensure_code(tree: Path, *, where: str) -> None:
    """WrongCode unless a merge's run runs its tree's own modules (where the tree holds the
    project: a repository of specs alone runs the runner's) with the dependencies the lock
    beside them names installed."""
    root = tree.resolve()
    foreign = foreign_modules(root) if (root / ENTRY).is_file() else {}
    if foreign:
        roots = sorted({str(r) for r in foreign.values()})
        raise WrongCode(
            f"{where}: this merge's run must run the code of its commit in {root}, but "
            f"{_few(foreign)} were imported from {_few(roots)}. Nothing was written to the "
            "cluster. The deployment's pull step makes the clone's modules the ones "
            "imported (flows/checkout.py, flows/running_code.load_from): check that the "
            "deployment's pull step is `flows.checkout.clone_run_commit`"
        )
    lock = code_root() / "uv.lock"
    wrong = lock_mismatches(lock) if lock.is_file() else []
    if wrong:
        raise WrongCode(
            f"{where}: this merge's code locks other dependencies than this runner has "
            f"installed ({_few(wrong)}; the lock: {lock}). Nothing was written to the "
            "cluster. Build the flow image from this commit and render the work pool with "
            "its digest (`handoff work-pool render --image ...`), or `uv sync --frozen` the "
            "process worker's environment at this commit, then run the handoff again"
        )


def _few(items: Iterable[str], most: int = 5) -> str:
    listed = list(items)
    more = f" and {len(listed) - most} more" if len(listed) > most else ""
    return ", ".join(listed[:most]) + more
