"""What a merge's run checks of its dependencies: the lock beside its code against the
distributions this interpreter has installed (the flow image's, the worker's)."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

from flows.running_code import lock_mismatches

LOCK = Path(__file__).resolve().parents[2] / "uv.lock"


def _relocked(tmp_path: Path, name: str, version: str) -> Path:
    text = LOCK.read_text()
    entry = re.escape(f'name = "{name}"\nversion = "') + r'[^"]+"'
    assert re.search(entry, text), name
    out = tmp_path / "uv.lock"
    out.write_text(re.sub(entry, f'name = "{name}"\nversion = "{version}"', text, count=1))
    return out


def test_this_checkouts_lock_is_what_is_installed() -> None:
    assert lock_mismatches(LOCK) == []


def test_a_dependency_at_another_version_is_named(tmp_path: Path) -> None:
    installed = importlib.metadata.version("httpx")
    assert lock_mismatches(_relocked(tmp_path, "httpx", "0.0.1")) == [
        f"httpx {installed} installed, 0.0.1 locked"
    ]


def test_a_development_tool_at_another_version_is_no_concern_of_the_run(
    tmp_path: Path,
) -> None:
    """ruff and pytest are installed here (a worker synced with its dev group) but the
    flow never imports them: bumping one must not refuse every merge's run."""
    assert lock_mismatches(_relocked(tmp_path, "ruff", "0.0.1")) == []
    assert lock_mismatches(_relocked(tmp_path, "pytest", "0.0.1")) == []


def test_an_unreadable_lock_is_said(tmp_path: Path) -> None:
    broken = tmp_path / "uv.lock"
    broken.write_text("version = [\n")
    [said] = lock_mismatches(broken)
    assert str(broken) in said and "unreadable" in said
