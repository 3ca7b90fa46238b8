"""The shipped RBAC is exactly `handoff rbac render` of the repository's specs: a spec
added or renamed without rendering again fails here, not in a cluster at 3 a.m."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.rbac.conftest import RBAC

ROOT = RBAC.parents[2]


def _render(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "rbac", "render", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_shipped_role_is_the_render_of_the_specs() -> None:
    rendered = _render()
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout == RBAC.read_text(), (
        "manifests/rbac/handoff.yaml differs from `handoff rbac render`: run "
        "`handoff rbac render --out manifests/rbac/handoff.yaml` and review the change"
    )


def test_every_write_names_its_objects_but_create() -> None:
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "Role")
    unnamed = {
        (r["resources"][0], verb)
        for r in role["rules"]
        if not r.get("resourceNames")
        for verb in r["verbs"]
        if verb not in ("get", "list", "watch", "create")
    }
    # Events are created and listed; nothing else is written without a name.
    assert unnamed == set(), unnamed


def test_a_spec_that_cannot_be_read_renders_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    result = _render(str(broken))
    assert result.returncode == 2 and result.stdout == ""
    assert "cannot render RBAC" in result.stderr and str(broken) in result.stderr


def _exec_rules(text: str) -> list[dict[str, object]]:
    role = next(d for d in yaml.safe_load_all(text) if d["kind"] == "Role")
    return [r for r in role["rules"] if "pods/exec" in r["resources"]]


def test_exec_into_pods_is_granted_only_to_a_spec_that_drains_by_connections(
    tmp_path: Path,
) -> None:
    assert _exec_rules(RBAC.read_text()) == [], "the shipped Role must not exec into pods"
    spec = ROOT / "manifests/handoffs/clef-candle.yaml"
    text = spec.read_text()
    assert "\nretire:" not in text
    # A repository of its own (pyproject.toml marks it) where the spec's relative paths
    # (../llm-serving, ../golden) resolve as in this one.
    (tmp_path / "pyproject.toml").touch()
    for sibling in ("llm-serving", "golden", "handoffs"):
        shutil.copytree(spec.parent.parent / sibling, tmp_path / sibling)
    opted = tmp_path / "handoffs" / spec.name
    opted.write_text(text + "retire:\n  drain_connections: true\n")
    rendered = _render(str(opted))
    assert rendered.returncode == 0, rendered.stderr
    assert _exec_rules(rendered.stdout) == [
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}
    ]
