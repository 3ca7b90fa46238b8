"""Errors reach the person running the handoff instead of being dropped: an unreadable
history annotation stops the run before anything changes (rewriting it would erase
the audit trail), and a port-forward that fails is named in the flow's error."""

from __future__ import annotations

from pathlib import Path

from flows.kube.client import Kube
from flows.ledger import ANNOTATION, HISTORY_ANNOTATION, parse_ledger
from tests.world import run_handoff, service, spec_in

MALFORMED = '[{"handoff_id": "earlier", "outcome": "done"}'  # truncated by a bad edit


def test_a_malformed_history_stops_the_run_with_nothing_changed(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    kube.core.patch_namespaced_service(
        "clef-serve", seeded, {"metadata": {"annotations": {HISTORY_ANNOTATION: MALFORMED}}}
    )
    before = service(kube, seeded, "clef-serve")
    result = run_handoff(spec_in(seeded, "clef-candle", tmp_path), handoff_env, "--auto-approve")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert f"{HISTORY_ANNOTATION} should be a JSON list" in output, output[-3000:]
    after = service(kube, seeded, "clef-serve")
    assert after.metadata.resource_version == before.metadata.resource_version
    assert after.metadata.annotations[HISTORY_ANNOTATION] == MALFORMED
    assert ANNOTATION not in after.metadata.annotations
    names = [d.metadata.name for d in kube.apps.list_namespaced_deployment(seeded).items]
    assert "clef-candle" not in names


def test_a_failed_port_forward_is_named_in_the_flows_error(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    """The spec names a port the candidate's container does not serve: the kubelet says
    so on the port-forward's error channel, and that reaches the rollback's cause."""
    spec_file = spec_in(seeded, "clef-candle", tmp_path, candidate={"port": 9999})
    result = run_handoff(spec_file, handoff_env, "--auto-approve")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    ledger = parse_ledger(service(kube, seeded, "clef-serve").metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back"
    assert "port-forward failed" in (ledger.cause or ""), ledger.cause
    assert "serves port 9999" in (ledger.cause or ""), ledger.cause
