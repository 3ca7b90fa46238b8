"""A ServerConfig names a known profile and turns back into the command line that recreates
it, so what a launcher asks for is what the child process runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from sandbox.modelserver import PROFILES, Fault, ServerConfig
from sandbox.modelserver.cli import model_server

FIXED_PROFILES = {
    "gptq-30b-a3b-tp1": ("qwen3-coder-30b-a3b-gptq", "fp16"),
    "fp16-14b-tp2": ("coder-14b-fp16", "fp16"),
    "clef-flash-pytorch": ("clef-flash", "fp32"),
    "clef-flash-candle": ("clef-flash", "fp16"),
    "cadence": ("cadence", "fp32"),
}


def test_profiles_and_their_default_model_ids_are_fixed() -> None:
    assert {n: (p.model_id, p.precision) for n, p in PROFILES.items()} == FIXED_PROFILES


def test_an_unknown_profile_is_refused_with_the_known_names() -> None:
    with pytest.raises(ValidationError, match="cadence"):
        ServerConfig(profile="nope", port=0)


def test_fault_is_accepted_as_the_flag_name() -> None:
    config = ServerConfig(profile="cadence", port=0, fault=["stall", "slow_start"])
    assert config.faults == (Fault.stall, Fault.slow_start)


def test_argv_round_trips_through_the_command_line(tmp_path: Path) -> None:
    config = ServerConfig(
        profile="clef-flash-candle",
        port=8123,
        model_id="clef-x",
        faults=(Fault.zero_key_band, Fault.stall),
        stall_after_tokens=7,
        slowdown=1.2,
        ground_truth=tmp_path / "t.jsonl",
        keep_alive_ms=100.0,
        realtime=False,
    )
    app = typer.Typer()
    app.command()(model_server)
    result = CliRunner().invoke(app, [*config.argv(), "--print-config"])
    assert result.exit_code == 0, result.output
    assert ServerConfig.model_validate_json(result.output) == config
