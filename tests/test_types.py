"""The type checker as a test: mypy over the packages pyproject's [tool.mypy] names, with
its settings there; a type error (or a `type: ignore` that no longer ignores anything)
fails the suite with mypy's report."""

from __future__ import annotations

import subprocess
import sys
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
