"""Model-server processes for the tests: real `python -m sandbox.modelserver` children on
127.0.0.1, started on demand and stopped (SIGTERM) when the module's tests are done."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.modelserver import ServerConfig
from sandbox.modelserver.launch import ServerProcess, start

StartServer = Callable[..., ServerProcess]


@pytest.fixture(scope="module")
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartServer]:
    """`start_server(profile=..., **config)`: a running server; `ground_truth=True` gives it
    a fresh ground-truth file (its path is `server.ground_truth`)."""
    started: list[ServerProcess] = []

    def _start(*, ground_truth: bool = False, **fields: Any) -> ServerProcess:
        if ground_truth:
            fields["ground_truth"] = tmp_path_factory.mktemp("truth") / "truth.jsonl"
        server = start(ServerConfig(port=0, **fields))
        started.append(server)
        return server

    yield _start
    for server in started:
        server.terminate()


def truth_path(server: ServerProcess) -> Path:
    path = server.config.ground_truth
    assert path is not None, "start the server with ground_truth=True"
    return path
