"""`handoff rollback` by hand takes the Service's Lease like a handoff does: while a live
handoff holds it the rollback is refused, naming the holder, and changes nothing; once
the Lease is free the rollback runs and gives the Lease back."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from flows.kube.client import Kube
from flows.lease import ServiceLease, read_holder
from flows.ledger import Ledger, Phase, Snapshot, parse_ledger
from flows.ledger_store import now_iso, save_ledger
from flows.spec import load_spec
from sandbox import controlplane
from tests.kube.test_spec_fuzz import valid_spec
from tests.lease.test_lease import SERVICE, admin, ns, plane

__all__ = ["admin", "ns", "plane"]  # the control plane fixtures, shared
pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def unfinished(admin: Kube, ns: str, tmp_path: Path) -> Iterator[Path]:
    """A spec of the Service, whose ledger says a handoff by `live-run` has swapped."""
    spec_file = tmp_path / "roll.yaml"
    spec_file.write_text(yaml.safe_dump({**valid_spec(ns, SERVICE), "name": "roll"}))
    now = now_iso()
    ledger = Ledger(
        handoff_id="live-run",
        spec="roll",
        phase=Phase.SWAPPED,
        strategy="side-by-side",
        snapshot=Snapshot(selector={"app": "old"}, cluster_ip="10.0.0.10", workloads=[]),
        started_at=now,
        updated_at=now,
    )
    save_ledger(admin, load_spec(spec_file), ledger)
    yield spec_file


def _rollback(
    plane: controlplane.ControlPlane, spec_file: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "rollback", str(spec_file), "--reason", "by hand"],
        env={**os.environ, "KUBECONFIG": str(plane.kubeconfig), "HANDOFF_LEASE_S": "30"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ledger(admin: Kube, ns: str) -> Ledger | None:
    return parse_ledger(admin.core.read_namespaced_service(SERVICE, ns).metadata.annotations)


def test_a_rollback_while_a_live_handoff_holds_the_lease_is_refused(
    plane: controlplane.ControlPlane, admin: Kube, ns: str, unfinished: Path
) -> None:
    before = admin.core.read_namespaced_service(SERVICE, ns).metadata.resource_version
    with ServiceLease(admin, ns, SERVICE, "live-run"):
        result = _rollback(plane, unfinished)
        output = result.stdout + result.stderr
        assert result.returncode == 2, output
        assert "being handed off by live-run" in " ".join(output.split()), output
        assert read_holder(admin, ns, SERVICE) == "live-run"
    after = admin.core.read_namespaced_service(SERVICE, ns).metadata.resource_version
    assert after == before, "the refused rollback wrote to the Service"
    ledger = _ledger(admin, ns)
    assert ledger is not None and ledger.phase == Phase.SWAPPED


def test_a_rollback_with_the_lease_free_takes_it_and_gives_it_back(
    plane: controlplane.ControlPlane, admin: Kube, ns: str, unfinished: Path
) -> None:
    result = _rollback(plane, unfinished)
    assert result.returncode == 0, result.stdout + result.stderr
    ledger = _ledger(admin, ns)
    assert ledger is not None and ledger.phase == Phase.ROLLED_BACK, ledger
    assert read_holder(admin, ns, SERVICE) is None, "the Lease was not given back"
