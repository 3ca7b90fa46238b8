"""Model-server processes for the tests: real `python -m sandbox.modelserver` children on
127.0.0.1, started on demand and stopped (SIGTERM) when the module's tests are done."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.modelserver import ServerConfig
from sandbox.modelserver.launch import ServerProcess, start_all

StartServers = Callable[..., list[ServerProcess]]


@pytest.fixture(scope="module")
def start_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartServers]:
    """`start_servers(dict(profile=..., **config), ...)`: running servers, started in
    parallel; `ground_truth=True` in a config gives that server a fresh ground-truth file."""
    started: list[ServerProcess] = []

    def _start(*configs: dict[str, Any]) -> list[ServerProcess]:
        resolved = []
        for fields in configs:
            fields = dict(fields)
            if fields.pop("ground_truth", False):
                fields["ground_truth"] = tmp_path_factory.mktemp("truth") / "truth.jsonl"
            resolved.append(ServerConfig(port=0, **fields))
        servers = start_all(resolved)
        started.extend(servers)
        return servers

    yield _start
    for server in started:
        server.terminate()


def truth_path(server: ServerProcess) -> Path:
    path = server.config.ground_truth
    assert path is not None, "start the server with ground_truth=True"
    return path
