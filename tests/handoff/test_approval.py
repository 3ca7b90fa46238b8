"""Approval and exclusion, with the real Prefect server: a paused handoff holds its
Service (a second handoff is refused at once), tells the approver through the spec's
notification block (and again when it rolls back), a rejection rolls back and is recorded
with the approver, and an approval nobody gives in time rolls back too. In place, a
spec may ask for a look at the gates during the outage: its form shows a running
downtime clock, its short timeout rolls back, and every approval is kept."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from flows.pause_clock import REFRESH_S
from tests.handoff.pauses import PausingRun, coder_spec
from tests.receiver import receiving, webhook_block
from tests.world import run_handoff, service, spec_in, wait_until

# Whole in-place handoffs with a person answering from the command line: on a shared,
# loaded machine one can take several minutes.
pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.outage_window(
        "in place: the Service has no ready pod from the old pods' stop to the swap"
    ),
]


def test_paused_handoff_excludes_another_and_rejection_rolls_back(
    kube: Kube,
    seeded: str,
    handoff_env: dict[str, str],
    tmp_path: Path,
) -> None:
    with receiving() as approvers:
        block = webhook_block(approvers.url, handoff_env["PREFECT_API_URL"])
        spec_file = spec_in(seeded, "coder-14b-fp16", tmp_path, notify={"block": block})
        # In place: pauses for the plan while the old pods serve.
        first = PausingRun.start(spec_file, handoff_env)
        try:
            first.wait_paused()
            told = approvers.texts()
            # refused after its slot wait (75 s): the rest is start-up and exit on a loaded machine
            second = run_handoff(spec_file, handoff_env, "--auto-approve", timeout_s=240)
            assert second.returncode != 0
            assert "is being handed off by" in second.stdout + second.stderr
            first.answer(handoff_env, "alice", "not during office hours", reject=True)
            assert first.wait(timeout_s=180) != 0
        finally:
            if first.process.poll() is None:
                first.process.kill()
    # the pause, with the evidence and where to answer; then the rollback and why
    assert len(told) == 1 and told[0].startswith("handoff coder-14b-fp16 waits for approval")
    assert f"/runs/flow-run/{first.run_id}" in told[0] and "declared downtime" in told[0]
    assert len(approvers.texts()) == 2, approvers.texts()
    assert approvers.texts()[1].startswith("handoff coder-14b-fp16 rolled back")
    assert "rejected by alice: not during office hours" in approvers.texts()[1]
    svc = service(kube, seeded, "coder-predictor")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back"
    assert "rejected by alice: not during office hours" in (ledger.cause or "")
    assert svc.spec.selector == {"app": "candle-vllm"}
    deployment = kube.apps.read_namespaced_deployment("candle-vllm", seeded)
    assert "Qwen3-Coder-30B-A3B" in " ".join(deployment.spec.template.spec.containers[0].args)
    assert history_entries(svc.metadata.annotations)[-1]["outcome"] == "rolled-back"


@pytest.mark.slow  # a rejection's rollback runs by default
def test_approval_timeout_rolls_back(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = spec_in(seeded, "coder-14b-fp16", tmp_path, approval={"timeout_s": 3})
    result = run_handoff(spec_file, handoff_env, timeout_s=240)
    assert result.returncode != 0
    ledger = parse_ledger(service(kube, seeded, "coder-predictor").metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back"
    assert "nobody approved within 3 s" in (ledger.cause or "")


@pytest.mark.slow  # the approval flow runs by default
def test_a_look_during_the_outage_is_bounded_timed_and_every_approval_kept(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = coder_spec(
        seeded,
        tmp_path,
        approval={"during_outage": True, "outage_timeout_s": 90},
    )
    run = PausingRun.start(spec_file, handoff_env)
    try:
        plan_key = run.wait_paused()
        assert "Downtime clock" not in run.description(plan_key)  # no outage yet
        assert "a person's look at the gates: 90 s" in run.description(plan_key)
        run.answer(handoff_env, "alice", "the outage is fine now")
        gates_key = run.wait_paused(other_than=plan_key)
        first = _seconds_down(run.description(gates_key))
        # each refresh is a few Prefect API calls: on a loaded machine the first may be late
        wait_until(
            lambda: _seconds_down(run.description(gates_key)) > first,
            timeout_s=15 * REFRESH_S,
            what="the downtime clock to run in the form",
            every_s=REFRESH_S,
        )
        run.answer(handoff_env, "bob", "gates look right")
        assert run.wait() == 0, run.output[-3000:]
    finally:
        if run.process.poll() is None:
            run.process.kill()
    svc = service(kube, seeded, "coder-predictor")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "done"
    record = history_entries(svc.metadata.annotations)[-1]
    approvals = record["approvals"]
    assert [(a["approver"], a["what"]) for a in approvals] == [
        ("alice", "the in-place plan"),
        ("bob", "the handoff"),
    ]
    assert [a["reason"] for a in approvals] == ["the outage is fine now", "gates look right"]
    for approval in approvals:
        assert re.fullmatch(r"[0-9a-f]{64}", approval["evidence_sha256"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", approval["at"])
    # The second approval is bound to the gates' evidence, the first to the plan shown.
    assert approvals[1]["evidence_sha256"] == record["evidence_sha256"]
    assert approvals[0]["evidence_sha256"] != approvals[1]["evidence_sha256"]
    assert [a.approver for a in ledger.approvals] == ["alice", "bob"]
    assert record["downtime_measured_s"] <= record["downtime_estimate_s"]


@pytest.mark.slow  # the expiry of the look; the look itself runs by default
def test_a_look_during_the_outage_that_nobody_gives_rolls_back_in_time(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = coder_spec(
        seeded,
        tmp_path,
        approval={"during_outage": True, "outage_timeout_s": 4},
    )
    run = PausingRun.start(spec_file, handoff_env)
    try:
        plan_key = run.wait_paused()
        run.answer(handoff_env, "alice", "go")
        run.wait_paused(other_than=plan_key)
        assert run.wait(timeout_s=240) != 0
    finally:
        if run.process.poll() is None:
            run.process.kill()
    annotations = service(kube, seeded, "coder-predictor").metadata.annotations
    ledger = parse_ledger(annotations)
    assert ledger is not None and ledger.phase == "rolled-back"
    assert "nobody approved within 4 s (approval.outage_timeout_s" in (ledger.cause or "")
    record = history_entries(annotations)[-1]
    assert record["downtime_measured_s"] <= record["downtime_bound_s"]


def _seconds_down(description: str) -> int:
    match = re.search(
        r"Downtime clock:\*\* no endpoints since [0-9:]+ UTC, (\d+) s so far", description
    )
    assert match, description[:500]
    return int(match.group(1))
