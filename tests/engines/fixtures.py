"""The real llama.cpp engine for tests: one server pool per test session.

Registered by tests/conftest.py, so every directory can ask for ``llamacpp`` and get
servers that stay up for the session (starting one takes a few seconds):

    server = llamacpp.get("f16", ServerOptions(flash_attn=True))
    httpx.post(f"{server.url}/v1/chat/completions", json=...)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.engines.llamacpp import ServerPool


@pytest.fixture(scope="session")
def llamacpp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    pool = ServerPool(tmp_path_factory.mktemp("llamacpp"))
    yield pool
    pool.close()
