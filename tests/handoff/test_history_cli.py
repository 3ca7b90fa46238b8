"""`handoff history` against the sandbox's cluster: kubectl-style columns within 80
characters, -o wide/json/yaml, one handoff in full, and the running sandbox used (and
said) when no kubeconfig is given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from PIL import Image
from typer.testing import CliRunner, Result

from cli import app
from flows.ledger import HISTORY_ANNOTATION
from flows.report.record import HandoffRecord, Trigger
from flows.report.timeline import StepSpan
from sandbox.state import SandboxState
from tests.webhook.servers import PrefectServer

SERVICE = "clef-serve-with-a-rather-long-name"
START = 1_795_946_400.0  # 2026-11-29T10:00:00Z


def _records(namespace: str) -> list[dict[str, object]]:
    done = HandoffRecord(
        handoff_id="0b5c1e2a-done",
        spec="clef-candle",
        namespace=namespace,
        service=SERVICE,
        strategy="side-by-side",
        outcome="done",
        image="127.0.0.1:5000/clef/candle@sha256:" + "a" * 64,
        gates={"smoke": "pass", "parity": "pass", "latency": "pass"},
        approver="ada.lovelace@example.org",
        trigger=Trigger(source="forgejo", merge_commit="c" * 40),
        durations_s={"apply": 1.234, "warm": 20.51, "gates": 95.06, "swap": 0.4},
        steps=[  # as the flow times them; gates waited 0.5 s after warm
            StepSpan(name=name, start=START + at, seconds=seconds, state="done")
            for name, at, seconds in (
                ("apply", 0.0, 1.234),
                ("warm", 1.3, 20.51),
                ("gates", 22.3, 95.06),
                ("swap", 117.5, 0.4),
            )
        ],
        ready_endpoints=[(START, 1), (START + 117.6, 2), (START + 126.0, 1)],
        started_at="2026-11-29T10:00:00Z",
        finished_at="2026-11-29T10:02:07Z",
    )
    rolled_back = done.model_copy(
        update={
            "handoff_id": "7f00aa11-rb",
            "outcome": "rolled-back",
            "gates": {"smoke": "pass", "parity": "fail"},
            "cause": "parity gate: 3 of 8 prompts diverge at token 0",
            "approver": None,
            "steps": [],
            "ready_endpoints": [],
            "started_at": "2026-11-29T11:00:00Z",
            "finished_at": "2026-11-29T11:01:30Z",
        }
    )
    return [done.compact(), rolled_back.compact()]


@pytest.fixture
def recorded(kube_api, namespace: str) -> str:  # type: ignore[no-untyped-def]
    from kubernetes import client

    client.CoreV1Api(kube_api).create_namespaced_service(
        namespace,
        {
            "metadata": {
                "name": SERVICE,
                "annotations": {HISTORY_ANNOTATION: json.dumps(_records(namespace))},
            },
            "spec": {"selector": {"app": "clef"}, "ports": [{"port": 80}]},
        },
    )
    return namespace


def _history(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "history", *args],
        env={**env, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _in_process(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(app, ["history", *args], env=env)


@pytest.fixture
def env(sandbox: SandboxState) -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(sandbox.kubeconfig), "PREFECT_API_URL": ""}


def test_default_columns_fit_80_characters(recorded: str, env: dict[str, str]) -> None:
    result = _history(env, "--namespace", recorded)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["WHEN", "SERVICE", "OUTCOME", "STRATEGY", "APPROVER", "TOOK"]
    assert all(len(line) <= 80 for line in lines), result.stdout
    assert lines[1].split()[:2] == ["11-29", "10:02"] and "2m07s" in lines[1]
    assert "done" in lines[1] and "side-by-side" in lines[1] and "ada." in lines[1]
    assert "rolled-back" in lines[2] and "1m30s" in lines[2]


def test_wide_json_and_yaml(recorded: str, env: dict[str, str]) -> None:
    """In process from here on: the CLI's own start-up is paid for once, above."""
    wide = _in_process(env, "--namespace", recorded, "-o", "wide")
    assert wide.exit_code == 0, wide.output
    assert SERVICE in wide.stdout and "ada.lovelace@example.org" in wide.stdout
    assert "parity:fail" in wide.stdout and "cccccccccccc" in wide.stdout
    as_json = json.loads(_in_process(env, "--namespace", recorded, "-o", "json").stdout)
    as_yaml = yaml.safe_load(_in_process(env, "--namespace", recorded, "-o", "yaml").stdout)
    assert as_json == as_yaml
    assert [e["outcome"] for e in as_json] == ["done", "rolled-back"]
    bad = _in_process(env, "--namespace", recorded, "-o", "table")
    assert bad.exit_code == 2 and "expected wide, json or yaml" in bad.output


def test_one_handoff_in_full(recorded: str, env: dict[str, str]) -> None:
    result = _in_process(env, "--namespace", recorded, "7f00aa11")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[3] == "Outcome:    rolled-back"
    assert lines[4] == "Cause:      parity gate: 3 of 8 prompts diverge at token 0"
    assert "  warm             20.5s" in lines and "  parity      fail" in lines
    assert "Approvals:  -" in lines
    one = json.loads(_in_process(env, "--namespace", recorded, "0b5c1e2a", "-o", "json").stdout)
    assert one["approver"] == "ada.lovelace@example.org"
    missing = _in_process(env, "--namespace", recorded, "ffff")
    assert missing.exit_code == 2 and "found 0" in missing.output


def _pixels_near(image: Image.Image, colour: tuple[int, int, int]) -> int:
    return sum(
        1
        for pixel in image.get_flattened_data()
        if all(abs(a - b) <= 30 for a, b in zip(pixel, colour, strict=True))
    )


def test_one_handoffs_timeline_as_a_file(
    recorded: str, env: dict[str, str], tmp_path: Path
) -> None:
    pictures = {}
    for run_id in ("0b5c1e2a-done", "7f00aa11-rb"):
        result = _in_process(env, "--namespace", recorded, run_id, "--out", str(tmp_path))
        assert result.exit_code == 0, result.output
        path = tmp_path / f"timeline-{run_id}.png"
        assert f"wrote {path}" in result.stderr
        with Image.open(path) as picture:
            assert picture.format == "PNG" and picture.size[0] == 880
            pictures[run_id] = picture.convert("RGB")
    done, rolled_back = pictures["0b5c1e2a-done"], pictures["7f00aa11-rb"]
    # Timed steps are drawn in their state's colour over the sampled ready endpoints (a
    # record of one count, older than the count per workload: olive); a record without
    # them shows its durations in grey and no endpoints.
    assert (
        _pixels_near(done, (44, 160, 44)) > 1000 and _pixels_near(rolled_back, (44, 160, 44)) == 0
    )
    assert _pixels_near(rolled_back, (128, 128, 128)) > 1000
    assert (
        _pixels_near(done, (188, 189, 34)) > 100 and _pixels_near(rolled_back, (188, 189, 34)) == 0
    )
    alone = _in_process(env, "--namespace", recorded, "--out", str(tmp_path))
    assert alone.exit_code == 2 and "give its RUN_ID too" in alone.output


@pytest.mark.slow  # a Prefect server of its own
def test_an_authenticated_prefect_is_read_with_its_credentials_only(
    recorded: str, env: dict[str, str], authed_prefect: PrefectServer
) -> None:
    env = {k: v for k, v in env.items() if k != "PREFECT_API_AUTH_STRING"}
    env["PREFECT_API_URL"] = authed_prefect.api_url
    refused = _history(env, "--namespace", recorded)
    output = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode == 2, output
    assert f"Prefect API {authed_prefect.api_url} answered 401 Unauthorized" in output, output
    assert "set PREFECT_API_AUTH_STRING" in output and "Traceback" not in output, output
    env["PREFECT_API_AUTH_STRING"] = authed_prefect.auth_string or ""
    read = _history(env, "--namespace", recorded)
    assert read.returncode == 0, read.stdout + read.stderr
    assert "rolled-back" in read.stdout


def test_without_a_kubeconfig_the_running_sandbox_is_used_and_named(
    recorded: str, sandbox: SandboxState, tmp_path: Path
) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    env |= {"HOME": str(tmp_path), "HANDOFF_SANDBOX_DIR": str(sandbox.run_dir)}
    env |= {"PREFECT_API_URL": ""}
    result = _history(env, "--namespace", recorded)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"export KUBECONFIG={sandbox.kubeconfig}" in result.stderr
    assert "rolled-back" in result.stdout
