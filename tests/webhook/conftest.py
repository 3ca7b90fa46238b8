"""Fixtures for the relay tests: a spec repository and a running relay per test (the
session's Prefect server is tests/conftest.py's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.webhook.app import RelaySettings
from tests.webhook.servers import PrefectServer, running_relay
from tests.webhook.specrepo import SpecRepo, bare_remote, make_spec_repo

SECRET = "correct horse battery staple"
REPOSITORY = "riotpiao-poimen/models"  # the full name tests/webhook/payloads.py sends


@pytest.fixture
def spec_repo(tmp_path: Path) -> SpecRepo:
    return make_spec_repo(tmp_path / "repo", ["alpha", "beta"])


@pytest.fixture
def settings(prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path) -> RelaySettings:
    return RelaySettings(
        secret=SECRET.encode(),
        specs_dir=spec_repo.specs_dir,
        repo_root=spec_repo.work,
        prefect_api_url=prefect.api_url,
        state_dir=tmp_path / "relay-state",
        max_body_bytes=64 * 1024,
        clone_url=str(bare_remote(spec_repo)),
        repository=REPOSITORY,
        max_backoff_s=0.5,
    )


@pytest.fixture
def relay(settings: RelaySettings) -> Iterator[str]:
    with running_relay(settings) as url:
        yield url
