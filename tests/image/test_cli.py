"""`handoff image check|wait` print the pinned reference and exit 0 for an image containing
the fix, exit 1 when no acceptable image exists (rejected or timed out), and exit 2 on
errors (unreachable registry, bad arguments)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli import app
from cli.image import parse_duration
from sandbox import procs
from sandbox.publisher import publish
from sandbox.registry import Registry
from sandbox.srcrepo import SourceRepo
from tests.image.conftest import TAG

runner = CliRunner()


def _args(command: str, image: str, source: SourceRepo, *extra: str) -> list[str]:
    return ["image", command, "--image", image, "--source", str(source.path),
            "--requires", source.commits["fix"], *extra]  # fmt: skip


def test_check_pins_a_fixed_image(registry: Registry, repository: str, source: SourceRepo) -> None:
    digest = publish(registry.url, repository, TAG, git_repo=source.path,
                     commit=source.commits["fix"])  # fmt: skip
    image = f"{registry.host}/{repository}:{TAG}"
    result = runner.invoke(app, _args("check", image, source, "--json"))
    assert result.exit_code == 0, result.output
    evidence = json.loads(result.stdout)
    assert evidence["ref"] == f"{registry.host}/{repository}@{digest}"
    assert evidence["fixes"][0]["found"] == "ancestor"


def test_pre_fix_image_exits_1(registry: Registry, repository: str, source: SourceRepo) -> None:
    publish(registry.url, repository, TAG, git_repo=source.path, commit=source.commits["gptq"])
    image = f"{registry.host}/{repository}:{TAG}"
    check = runner.invoke(app, _args("check", image, source))
    assert check.exit_code == 1 and source.commits["gptq"] in check.stderr
    wait = runner.invoke(app, _args("wait", image, source, "--timeout", "1s",
                                    "--poll-interval", "1s"))  # fmt: skip
    assert wait.exit_code == 1
    assert "seen sha256:" in wait.stderr and "rejected" in wait.stderr


def test_unreachable_registry_exits_2(repository: str, source: SourceRepo) -> None:
    image = f"127.0.0.1:{procs.free_port()}/{repository}:{TAG}"
    result = runner.invoke(app, _args("check", image, source))
    assert result.exit_code == 2 and "did not answer" in result.stderr


@pytest.mark.parametrize("bad", [["--timeout", "soon"], ["--timeout", "0s"]])
def test_bad_arguments_exit_2(registry: Registry, source: SourceRepo, bad: list[str]) -> None:
    result = runner.invoke(app, _args("wait", f"{registry.host}/x:y", source, *bad))
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1h30m", 5400), ("1d", 86400),
     ("0.5s", 0.5)],
)  # fmt: skip
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
