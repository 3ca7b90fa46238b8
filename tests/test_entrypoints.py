"""Every deployment of prefect.yaml names a flow that imports: `prefect deploy` (and a
worker starting a run) load it by its entrypoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from prefect import Flow
from prefect.flows import load_flow_from_entrypoint

ROOT = Path(__file__).resolve().parents[1]
DEPLOYMENTS = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d["name"] for d in DEPLOYMENTS])
def test_the_entrypoint_is_a_flow(
    deployment: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert isinstance(load_flow_from_entrypoint(deployment["entrypoint"]), Flow)
