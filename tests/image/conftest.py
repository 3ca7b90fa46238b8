"""Fixtures for the image tests: one real docker-registry per session (started through
``sandbox.registry``), a fresh simulated candle-vllm source repository per test, and a
repository name of its own per test so tests never see each other's tags."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flows.image import ImageRequirement
from sandbox.registry import Registry
from sandbox.srcrepo import SourceRepo, create_candle_vllm_repo

TAG = "sm70"


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    started = Registry.start(tmp_path_factory.mktemp("registry-run"))
    yield started
    started.stop()


@pytest.fixture
def source(tmp_path: Path) -> SourceRepo:
    return create_candle_vllm_repo(tmp_path / "candle-vllm")


@pytest.fixture
def repository(request: pytest.FixtureRequest) -> str:
    """``riotpiao-poimen/<test name>``: lowercase, as registry names must be."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:60].strip("-")
    return f"riotpiao-poimen/{name}"


MakeRequirement = Callable[..., ImageRequirement]


@pytest.fixture
def make_requirement(
    registry: Registry, repository: str, source: SourceRepo, tmp_path: Path
) -> MakeRequirement:
    """An ``ImageRequirement`` for this test's repository, requiring the GDN conv fix."""

    def make(**overrides: object) -> ImageRequirement:
        fields: dict[str, object] = {
            "repo": f"{registry.host}/{repository}",
            "tag": TAG,
            "source": str(source.path),
            "requires": [source.commits["fix"]],
            "git_cache": tmp_path / "git-cache",
            "timeout_s": 30.0,
            "poll_interval_s": 1.0,
        }
        return ImageRequirement.model_validate(fields | overrides)

    return make
