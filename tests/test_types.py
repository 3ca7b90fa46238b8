"""The type checker as a test: mypy over the packages pyproject's [tool.mypy] names, with
its settings there; a type error (or a `type: ignore` that no longer ignores anything)
fails the suite with mypy's report. Those packages are all of the project's: the ones the
import contracts (`[tool.importlinter]`) arrange."""

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


def test_mypy_checks_every_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    checked = set(config["tool"]["mypy"]["packages"])
    packages = set(config["tool"]["importlinter"]["root_packages"])
    assert checked == packages, (
        f"[tool.mypy] packages {sorted(checked)} differ from the project's packages "
        f"{sorted(packages)} ([tool.importlinter] root_packages): list each in both"
    )
