"""A handoff run again converges instead of acting on the spec's picture of the world.

A finished handoff run again (a second merge, a retry, a person making sure) finds the
Service already serving the spec's revision and ends `done` with nothing written but its
history entry, even when the image's source cannot be reached; a run that fails before
its first write leaves every object as it found it and writes no rollback; a handoff that
rolled back, run again while its cause persists, rolls back again without touching the
live workload."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from sandbox.proxy import address_of
from sandbox.seed import CLIENT_API
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.handoff.test_side_by_side import crash_looping_spec
from tests.world import run_handoff, service, spec_in

FAST = {"parity": None, "latency": None}
SERVICE = "clef-serve"


def _versions(kube: Kube, namespace: str) -> dict[str, str]:
    """Every Deployment's resourceVersion: any write to one changes it."""
    items = kube.apps.list_namespaced_deployment(namespace).items
    return {d.metadata.name: d.metadata.resource_version for d in items}


def _events(kube: Kube, namespace: str) -> list[str]:
    found = kube.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=Service,involvedObject.name={SERVICE}"
    )
    return sorted(f"{e.reason}: {e.message}" for e in found.items)


def test_a_finished_handoff_run_again_changes_nothing_even_with_its_source_unreachable(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates=FAST)
    first = run_handoff(spec_file, handoff_env, "--auto-approve")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    done = service(kube, seeded, SERVICE)
    workloads, events = _versions(kube, seeded), _events(kube, seeded)
    # The same spec, its image's source gone: a run that needed the image would fail.
    again_file = spec_in(
        seeded, "clef-candle", tmp_path, gates=FAST, image={"source": "/nonexistent"}
    )
    url = "http://" + address_of(sandbox.run_dir, seeded, SERVICE, 80)
    with ClientLoad(url, api=CLIENT_API[SERVICE], streams=4) as load:
        again = run_handoff(again_file, handoff_env, "--auto-approve")
    output = again.stdout[-3000:] + again.stderr[-3000:]
    assert again.returncode == 0, output
    assert load.succeeded > 0 and load.failed == [] and load.retried == 0, load.failed[:3]
    after = service(kube, seeded, SERVICE)
    assert after.spec.selector == done.spec.selector
    assert parse_ledger(after.metadata.annotations) == parse_ledger(done.metadata.annotations)
    assert _versions(kube, seeded) == workloads, "a Deployment was written"
    assert _events(kube, seeded) == events, "an Event was recorded"
    entries = history_entries(after.metadata.annotations)
    assert entries[:-1] == history_entries(done.metadata.annotations)
    last = entries[-1]
    assert last["outcome"] == "done" and last["changed"] is False, last
    assert "nothing to do" in last["cause"], last


def test_a_run_that_fails_before_its_first_write_makes_no_rollback_write(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    before = service(kube, seeded, SERVICE)
    workloads, events = _versions(kube, seeded), _events(kube, seeded)
    never = f"sm70-{uuid.uuid4().hex[:8]}"  # never published: the image wait gives up
    spec_file = spec_in(
        seeded, "clef-candle", tmp_path, gates=FAST, image={"tag": never, "timeout_s": 3}
    )
    result = run_handoff(spec_file, handoff_env, "--auto-approve")
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode != 0, output
    after = service(kube, seeded, SERVICE)
    assert after.spec.selector == before.spec.selector
    assert _versions(kube, seeded) == workloads, "a Deployment was written"
    assert _events(kube, seeded) == events, "a rollback Event was recorded"
    ledger = parse_ledger(after.metadata.annotations)
    assert ledger is not None and ledger.phase == "rolled-back", output
    assert ledger.cause and "nothing to undo" in ledger.cause, ledger.cause


@pytest.mark.slow  # the reruns' convergence runs by default
def test_a_record_lost_between_the_last_ledger_write_and_the_history_is_recovered(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    """A run killed after its ledger's terminal write and before its history entry: the
    next run records the finished handoff from its ledger before anything else."""
    never = f"sm70-{uuid.uuid4().hex[:8]}"
    spec_file = spec_in(
        seeded, "clef-candle", tmp_path, gates=FAST, image={"tag": never, "timeout_s": 3}
    )
    first = run_handoff(spec_file, handoff_env, "--auto-approve")
    assert first.returncode != 0, first.stdout[-3000:] + first.stderr[-3000:]
    ended = parse_ledger(service(kube, seeded, SERVICE).metadata.annotations)
    assert ended is not None and ended.phase == "rolled-back"
    # The state such a kill leaves: the ledger terminal, its history entry missing.
    kube.core.patch_namespaced_service(
        SERVICE, seeded, {"metadata": {"annotations": {"handoff.dev/history": None}}}
    )
    again = run_handoff(spec_file, handoff_env, "--auto-approve")
    assert again.returncode != 0, again.stdout[-3000:] + again.stderr[-3000:]
    entries = history_entries(service(kube, seeded, SERVICE).metadata.annotations)
    recovered = [e for e in entries if e["handoff_id"] == ended.handoff_id]
    assert len(recovered) == 1, entries
    assert (
        recovered[0]["outcome"] == "rolled-back" and "recovered" in recovered[0]["endpoints_note"]
    )
    assert entries[-1]["handoff_id"] != ended.handoff_id  # the second run's own record


def test_a_rolled_back_handoff_run_again_rolls_back_again_leaving_the_live_workload(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    """The candidate crash-loops (no runtime class: no GPU library), so the handoff rolls
    back; the same spec run again rolls back again. The rerun never writes the live
    Deployment nor moves the Service, whose clients are served throughout (and whose
    invariants are watched: it never selects nothing); the candidate ends where the first
    rollback left it, and the history holds both handoffs."""
    spec_file = crash_looping_spec(seeded, tmp_path, gates=FAST)
    selector = service(kube, seeded, SERVICE).spec.selector
    first = run_handoff(spec_file, handoff_env, "--auto-approve")
    assert first.returncode != 0, first.stdout[-3000:] + first.stderr[-3000:]
    ended = parse_ledger(service(kube, seeded, SERVICE).metadata.annotations)
    assert ended is not None and ended.phase == "rolled-back", ended
    live = {n: v for n, v in _versions(kube, seeded).items() if n != "clef-candle"}
    candidate = kube.apps.read_namespaced_deployment("clef-candle", seeded).spec
    url = "http://" + address_of(sandbox.run_dir, seeded, SERVICE, 80)
    with ClientLoad(url, api=CLIENT_API[SERVICE], streams=4) as load:
        again = run_handoff(spec_file, handoff_env, "--auto-approve")
    output = again.stdout[-3000:] + again.stderr[-3000:]
    assert again.returncode != 0, output
    assert load.succeeded > 0 and load.failed == [], load.failed[:3]
    after = service(kube, seeded, SERVICE)
    assert after.spec.selector == selector
    rerun = parse_ledger(after.metadata.annotations)
    assert rerun is not None and rerun.phase == "rolled-back", output
    assert rerun.handoff_id != ended.handoff_id and "crash" in (rerun.cause or "").lower(), rerun
    assert not rerun.edited, rerun.edited  # nothing taken for a person's edit
    now = _versions(kube, seeded)
    assert {n: v for n, v in now.items() if n != "clef-candle"} == live, "a live one was written"
    kept = kube.apps.read_namespaced_deployment("clef-candle", seeded).spec
    assert (kept.replicas, kept.template) == (candidate.replicas, candidate.template)
    outcomes = [
        (e["handoff_id"], e["outcome"]) for e in history_entries(after.metadata.annotations)
    ]
    assert outcomes[-2:] == [(ended.handoff_id, "rolled-back"), (rerun.handoff_id, "rolled-back")]
