"""Fixtures that run real simulated model servers for the gate tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gates.parity.golden import record_golden
from gates.parity.golden_format import Golden, GoldenSettings
from tests.gates.servers import ModelServer, start_server

REPO = Path(__file__).resolve().parents[2]
PARITY_PROMPTS = REPO / "manifests" / "prompts" / "parity.jsonl"
REFERENCE_TEXT = REPO / "manifests" / "prompts" / "reference.txt"

StartServer = Callable[..., ModelServer]
# Parity compares numbers, not timing: run the clef-flash servers at a twentieth of their time.
FAST = ("--time-scale", "0.05")
# Latency tests halve every simulated duration, on both sides alike, to stay short.
HALF_TIME = ("--time-scale", "0.5")


@pytest.fixture(scope="session")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartServer]:
    """`model_server(profile, *args, ground_truth=False)` starts a server for the session;
    the same arguments give the same running server. All are stopped at the end."""
    workdir = tmp_path_factory.mktemp("modelservers")
    running: dict[tuple[str, tuple[str, ...], bool], ModelServer] = {}

    def start(profile: str, *args: str, ground_truth: bool = False) -> ModelServer:
        key = (profile, args, ground_truth)
        if key not in running or running[key].process.poll() is not None:
            running[key] = start_server(
                profile, workdir=workdir, args=args, ground_truth=ground_truth
            )
        return running[key]

    yield start
    for server in running.values():
        server.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[StartServer]:
    """Like `model_server`, but every call starts a new process, stopped after the test."""
    started: list[ModelServer] = []

    def start(profile: str, *args: str, ground_truth: bool = False) -> ModelServer:
        started.append(
            start_server(profile, workdir=tmp_path, args=args, ground_truth=ground_truth)
        )
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def clef_golden(model_server: StartServer) -> Golden:
    """Golden outputs recorded from the fp32 reference (clef-flash on pytorch), with the
    simulator's probes and heads extensions."""
    reference = model_server("clef-flash-pytorch", *FAST)
    return record_golden(
        reference.url,
        PARITY_PROMPTS,
        reference_file=REFERENCE_TEXT,
        settings=GoldenSettings(extensions=["probes", "heads"]),
    )
