"""Changed files → handoffs: a handoff is affected exactly when its spec, its candidate
manifest or its golden file changed; a spec that cannot be read is reported, not fatal."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.webhook.specs import find_repo_root, index_specs
from tests.webhook.specrepo import make_spec_repo


@pytest.mark.parametrize(
    ("changed", "affected"),
    [
        ({"manifests/handoffs/alpha.yaml"}, ["alpha"]),
        ({"manifests/llm-serving/alpha.yaml"}, ["alpha"]),
        ({"manifests/golden/beta.json"}, ["beta"]),
        ({"manifests/golden/alpha.json", "manifests/handoffs/beta.yaml"}, ["alpha", "beta"]),
        ({"README.md", "manifests/llm-serving/other.yaml", "alpha.yaml"}, []),
        (set(), []),
    ],
)
def test_changed_files_map_to_the_specs_they_affect(
    tmp_path: Path, changed: set[str], affected: list[str]
) -> None:
    repo = make_spec_repo(tmp_path, ["alpha", "beta"])
    index = index_specs(repo.specs_dir, repo.work)
    assert [t.name for t in index.affected(frozenset(changed))] == affected


def test_a_broken_spec_is_reported_and_the_rest_still_map(tmp_path: Path) -> None:
    repo = make_spec_repo(tmp_path, ["alpha"])
    (repo.specs_dir / "broken.yaml").write_text("name: broken\nnamespace: [\n")
    index = index_specs(repo.specs_dir, repo.work)
    assert [t.name for t in index.targets] == ["alpha"]
    [error] = index.errors
    assert "broken.yaml" in error and "not valid YAML" in error


def test_the_repository_root_is_the_git_work_tree(tmp_path: Path) -> None:
    repo = make_spec_repo(tmp_path, ["alpha"])
    assert find_repo_root(repo.specs_dir) == repo.work
    target = index_specs(repo.specs_dir, repo.work).targets[0]
    assert target.spec_file == "manifests/handoffs/alpha.yaml"
    assert (target.namespace, target.service) == (repo.namespace, repo.services["alpha"])
