"""The type checker as a test: mypy over the folders pyproject's [tool.mypy] names, with
its settings there; a type error (or a `type: ignore` that no longer ignores anything)
fails the suite with mypy's report. Those folders are all of the project's packages (the
ones the import contracts, `[tool.importlinter]`, arrange), the documentation site's
build hooks and the benchmarks."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Outside the repository, shared by checkouts: mypy re-checks a module whose source differs
# from what the cache was made from, so a clone starts warm (cold: ~30 s of CPU).
CACHE = Path.home() / ".cache/handoff/mypy"


def test_mypy_finds_no_type_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(CACHE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"mypy found type errors:\n{result.stdout}{result.stderr}"


def test_mypy_checks_every_package_and_the_docs_hooks() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    checked = set(config["tool"]["mypy"]["files"])
    packages = set(config["tool"]["importlinter"]["root_packages"])
    hooks = {str(Path(h).parent) for h in yaml_hooks()}
    # The benchmarks import the test servers, so no import contract arranges them.
    scripts = {"benchmarks"}
    assert checked == packages | hooks | scripts, (
        f"[tool.mypy] files {sorted(checked)} differ from the project's packages "
        f"{sorted(packages)} ([tool.importlinter] root_packages), the folders of "
        f"mkdocs.yml's hooks {sorted(hooks)} and the benchmarks: list each in both"
    )


def yaml_hooks() -> list[str]:
    """The documentation site's build hooks, as mkdocs.yml names them."""
    import yaml

    return list(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["hooks"])
