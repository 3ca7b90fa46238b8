"""The smoke gate passes a server that lists the expected model and answers, and fails (as a
value, not an exception) one that lists another model or does not listen at all."""

from __future__ import annotations

import socket

from gates.smoke import run_smoke
from tests.gates.conftest import FAST, StartServer


def test_passes_a_server_that_lists_the_model_and_answers(model_server: StartServer) -> None:
    server = model_server("clef-flash-candle", *FAST)
    result = run_smoke(server.url, model_id="clef-flash", deadline_s=30)
    assert result.passed, result.reason
    assert result.figures.output_text
    assert "clef-flash" in result.figures.listed_models


def test_fails_a_server_that_runs_another_model(model_server: StartServer) -> None:
    server = model_server("clef-flash-candle", *FAST)
    result = run_smoke(server.url, model_id="coder-14b-fp16", deadline_s=30)
    assert result.passed is False
    assert "expected 'coder-14b-fp16'" in result.reason


def test_fails_when_nothing_listens() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and is closed now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_smoke(f"http://127.0.0.1:{port}", model_id="clef-flash", deadline_s=5)
    assert result.passed is False
    assert "ConnectError" in result.reason
    assert "## smoke gate: FAIL" in result.markdown()
