"""A real Prefect server for the flow tests that need one (shared with the relay tests)."""

from __future__ import annotations

import pytest

from tests.webhook.servers import PrefectServer, shared_prefect


@pytest.fixture(scope="session")
def prefect(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> PrefectServer:
    return shared_prefect(request, tmp_path_factory.mktemp("prefect"))
