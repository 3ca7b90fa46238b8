"""The Prefect server (with its UI) shared with the relay tests."""

from __future__ import annotations

import pytest

from tests.webhook.servers import PrefectServer, shared_prefect


@pytest.fixture(scope="session")
def prefect(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> PrefectServer:
    return shared_prefect(request, tmp_path_factory.mktemp("prefect"))


# The model servers the pictures measure, and the golden the parity picture compares with.
from tests.gates.conftest import clef_golden, model_server  # noqa: E402, F401
