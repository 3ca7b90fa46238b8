"""A spec that lists its approvers takes an approval only when it is signed with the
listed key of the name it carries: someone holding Prefect's credentials who types
alice's name, or signs with another key, stops the handoff before anything is written;
alice's own signed approval lets it go on, and the record says it was signed."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from flows.report.attest import keygen
from tests.handoff.pauses import PausingRun, coder_spec
from tests.world import service

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.outage_window(
        "in place: the Service has no ready pod from the old pods' stop to the swap"
    ),
]


def test_only_an_approval_signed_by_a_listed_approver_lets_the_handoff_go_on(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    alice, mallory = tmp_path / "alice.key", tmp_path / "mallory.key"
    alice_pub = keygen(alice)
    keygen(mallory)
    # The approval is under test, not the task gate.
    spec_file = coder_spec(
        seeded, tmp_path, approval={"approvers": {"alice": str(alice_pub)}}, gates={"task": None}
    )

    forged = PausingRun.start(spec_file, handoff_env)
    try:
        forged.wait_paused()
        forged.answer(handoff_env, "alice", "looks fine", key=mallory)
        assert forged.wait(timeout_s=180) != 0, forged.output[-2000:]
    finally:
        if forged.process.poll() is None:
            forged.process.kill()
    svc = service(kube, seeded, "coder-predictor")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back"
    assert "approval by 'alice' refused" in (ledger.cause or ""), ledger.cause
    assert svc.spec.selector == {"app": "candle-vllm"}, "nothing was handed off"
    [kept] = history_entries(svc.metadata.annotations)[-1]["approvals"]
    assert kept["decision"] == "reject" and "is not alice's key" in kept["identity"]

    signed = PausingRun.start(spec_file, handoff_env)
    try:
        signed.wait_paused()
        signed.answer(handoff_env, "alice", "window agreed", key=alice)
        assert signed.wait(timeout_s=300) == 0, signed.output[-3000:]
    finally:
        if signed.process.poll() is None:
            signed.process.kill()
    record = history_entries(service(kube, seeded, "coder-predictor").metadata.annotations)[-1]
    assert record["outcome"] == "done", record.get("cause")
    [kept] = record["approvals"]
    assert kept["approver"] == "alice" and kept["identity"].startswith("signed with alice's key")
