"""The daily path, end to end with real parts: a merge pushed to the models repository
runs the post-receive hook → the relay → a Prefect event → the trigger of the deployment
from prefect.yaml → a process worker → the handoff flow on the sandbox, which pauses
for a person who approves it in the Prefect UI; the record names the merge, the
delivery and the approver. Two merges in quick succession: only the newest is handed
off, the older run stops before writing anything and says why; a merge whose Service
is being handed off waits for its turn and checks again. Handoffs of two Services run
at once: one waiting for CI does not hold up the other."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prefect.client.schemas import filters
from prefect.client.schemas.objects import FlowRun
from prefect.flow_runs import resume_flow_run
from prefect.settings import PREFECT_API_URL, temporary_settings
from pydantic import BaseModel

from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from flows.slots import service_slot
from sandbox.publisher import publish
from sandbox.seed import ORG, World
from tests.ui.browser import approve_in_ui, chromium
from tests.webhook.conftest import SECRET
from tests.webhook.deploy import (
    deploy_all,
    merge_spec_change,
    models_repository,
    remove_deployments,
    worker,
)
from tests.webhook.runs import read_runs, state_of
from tests.webhook.servers import PrefectServer, relay_process
from tests.webhook.specrepo import REPO, SpecRepo, install_hook
from tests.world import service, wait_until

SPEC = "coder-14b-fp16"
FINAL = {"Completed", "Failed", "Cancelled", "Crashed"}


class DailyPath(BaseModel):
    repo: SpecRepo
    deployment_id: str
    root: Path


@pytest.fixture(scope="module")
def daily(
    prefect: PrefectServer,
    handoff_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[DailyPath]:
    root = tmp_path_factory.mktemp("daily")
    repo = models_repository(root)
    with relay_process(
        specs_dir=repo.specs_dir,
        api_url=prefect.api_url,
        secret=SECRET,
        state_dir=root / "relay",
        log=root / "relay.log",
        options=("--clone-url", str(repo.bare)),
    ) as relay:
        install_hook(repo.bare, relay_url=relay, secret=SECRET)  # type: ignore[arg-type]
        deployment = deploy_all(prefect.api_url, repo.bare)  # type: ignore[arg-type]
        try:
            with worker(prefect.api_url, handoff_env, root / "worker.log"):
                yield DailyPath(repo=repo, deployment_id=deployment, root=root)
        finally:
            remove_deployments(prefect.api_url)


def into(namespace: str, approval_timeout_s: int) -> Any:
    """A spec edit: the coder handoff in the test's namespace, with its latency SLO
    relaxed (a shared machine) and no task gate (the trigger is under test, not the
    gates); the approval timeout makes each merge different."""

    def edit(raw: dict[str, Any]) -> None:
        raw["namespace"] = namespace
        raw["gates"]["latency"]["slo"] = {"tpot_ms": 500, "ttft_ms": 10000}
        raw["gates"].pop("task", None)
        raw["approval"]["timeout_s"] = approval_timeout_s

    return edit


def runs_of(daily: DailyPath, prefect: PrefectServer, merge: str) -> list[FlowRun]:
    deployment = filters.FlowRunFilterDeploymentId(any_=[uuid.UUID(daily.deployment_id)])
    return [
        r
        for r in read_runs(prefect.api_url, deployment_id=deployment)
        if (r.parameters.get("trigger") or {}).get("merge_commit") == merge
    ]


def approve_until_final(
    daily: DailyPath, prefect: PrefectServer, merge: str, *, timeout_s: float = 600
) -> tuple[FlowRun, list[str]]:
    """Approve every pause of the merge's run in the UI until the run ends."""
    answered: list[str] = []

    def pending() -> FlowRun | None:
        [run] = runs_of(daily, prefect, merge) or [None]
        if run is None:
            return None
        paused = state_of(run) == "Paused" and run.state.state_details.pause_key not in answered
        return run if paused or state_of(run) in FINAL else None

    with chromium() as browser:
        while True:
            run = wait_until(pending, timeout_s=timeout_s, what=f"the run of merge {merge[:12]}")
            if state_of(run) in FINAL:
                return run, answered
            key = run.state.state_details.pause_key
            approve_in_ui(
                browser,
                f"{prefect.ui_url}/runs/flow-run/{run.id}",
                auth_string=prefect.auth_string,
                approver="Ada Lovelace",
                decision="approve",
                reason=f"{key}: evidence reviewed",
                screenshot=f"handoff-{key}.png",
            )
            answered.append(key)


def history(namespace: str, env: dict[str, str], prefect: PrefectServer) -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "cli", "history", "--namespace", namespace, "--json"],
        env={**env, "PREFECT_API_URL": prefect.api_url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


# By default the merge path runs in the two-Services test, the UI approval in tests/ui.
@pytest.mark.slow
def test_a_merge_is_handed_off_after_approval_in_the_ui(
    daily: DailyPath,
    prefect: PrefectServer,
    kube: Kube,
    seeded: str,
    handoff_env: dict[str, str],
) -> None:
    merge, pushed = merge_spec_change(daily.repo, SPEC, into(seeded, 600), "coder: 14B fp16")
    assert '"outcome":"accepted"' in pushed, pushed
    delivery = pushed.split("delivery ")[1].split(":")[0]
    run, answered = approve_until_final(daily, prefect, merge)
    assert state_of(run) == "Completed", run.state
    assert len(answered) == 1  # in place: the plan only, before the old pods stop
    assert run.parameters["spec_file"] == f"manifests/handoffs/{SPEC}.yaml"
    assert "service:coder-predictor" in run.tags
    svc = service(kube, seeded, "coder-predictor")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and (ledger.phase, ledger.approver) == ("done", "Ada Lovelace")
    record = history_entries(svc.metadata.annotations)[-1]
    expected = {
        "source": "forgejo",
        "delivery_id": delivery,
        "merge_commit": merge,
        "repository": "riotpiao-poimen/models",
    }
    assert {k: record["trigger"].get(k) for k in expected} == expected, record["trigger"]
    [audit] = [
        e for e in history(seeded, handoff_env, prefect) if e.get("flow_run_id") == str(run.id)
    ]
    assert audit["approver"] == "Ada Lovelace" and audit["trigger"]["merge_commit"] == merge
    assert audit["prefect"]["state"] == "Completed"
    assert audit["prefect"]["report"] == f"handoff {SPEC}: done"


@pytest.mark.slow
@pytest.mark.timeout(600)  # seeding and an in-place handoff: minutes on a loaded machine
def test_two_quick_merges_hand_off_only_the_newest(
    daily: DailyPath,
    prefect: PrefectServer,
    kube: Kube,
    seeded: str,
    handoff_env: dict[str, str],
) -> None:
    older, _ = merge_spec_change(daily.repo, SPEC, into(seeded, 601), "coder: first try")
    newer, _ = merge_spec_change(daily.repo, SPEC, into(seeded, 602), "coder: second")
    run, _ = approve_until_final(daily, prefect, newer)
    assert state_of(run) == "Completed", run.state
    [superseded] = wait_until(
        lambda: [r for r in runs_of(daily, prefect, older) if state_of(r) in FINAL],
        timeout_s=300,
        what=f"the run of the older merge {older[:12]} to end",
    )
    assert state_of(superseded) == "Cancelled"
    assert (
        "superseded" in (superseded.state.message or "") and newer[:12] in superseded.state.message
    )
    records = history_entries(service(kube, seeded, "coder-predictor").metadata.annotations)
    assert [r["trigger"]["merge_commit"] for r in records] == [newer]
    audit = history(seeded, handoff_env, prefect)
    assert [e["outcome"] for e in audit if e.get("flow_run_id") == str(superseded.id)] == [
        "superseded"
    ]


def one_run(daily: DailyPath, prefect: PrefectServer, merge: str) -> FlowRun | None:
    [run] = runs_of(daily, prefect, merge) or [None]
    return run


def logged(prefect: PrefectServer, run: FlowRun, text: str) -> bool:
    """Whether the run has logged a line containing text."""
    found = httpx.post(
        f"{prefect.api_url}/logs/filter",
        json={"logs": {"flow_run_id": {"any_": [str(run.id)]}}, "limit": 200},
        headers=prefect.headers,
        timeout=30,
    )
    found.raise_for_status()
    return any(text in line["message"] for line in found.json())


def answer(prefect: PrefectServer, run: FlowRun, decision: str) -> str:
    """Answer the run's pending pause through the API (as `handoff approve` does)."""
    key = run.state.state_details.pause_key
    with temporary_settings({PREFECT_API_URL: prefect.api_url}):
        resume_flow_run(
            run.id,
            run_input={"approver": "Grace Hopper", "decision": decision, "reason": f"{key} seen"},
        )
    return str(key)


@pytest.mark.timeout(900)
def test_two_services_hand_off_at_once(
    daily: DailyPath,
    prefect: PrefectServer,
    kube: Kube,
    world: World,
    seeded: str,
    spare_gpus: str,
) -> None:
    """clef-serve's handoff waits for CI to publish its image; meanwhile a merge for
    coder-predictor is handed off up to its approval. Both then end done."""
    tag = f"sm70-ci-{uuid.uuid4().hex[:6]}"

    def clef(raw: dict[str, Any]) -> None:
        raw["namespace"] = seeded
        raw["image"]["tag"] = tag  # not published yet: the run waits for CI
        raw["image"]["timeout_s"] = 600
        raw["gates"].pop("latency")  # parity decides here; latency is another test's
        raw["approval"]["timeout_s"] = 600

    def clef_started() -> bool:
        ledger = parse_ledger(service(kube, seeded, "clef-serve").metadata.annotations)
        return ledger is not None and ledger.phase == "started"

    waiting, _ = merge_spec_change(daily.repo, "clef-candle", clef, "clef: candle-vllm")
    wait_until(clef_started, timeout_s=120, what=f"the clef-candle run to wait for {tag}")
    other, _ = merge_spec_change(daily.repo, SPEC, into(seeded, 603), "coder: 14B fp16")
    paused = wait_until(
        lambda: (r := one_run(daily, prefect, other)) and state_of(r) == "Paused" and r,
        timeout_s=150,
        what="the coder run to pause for approval while the clef-candle run waits for CI",
    )
    assert state_of(one_run(daily, prefect, waiting)) == "Running"  # type: ignore[arg-type]
    assert clef_started(), "the clef-candle run should still be waiting for its image"
    answered = {waiting: [], other: [answer(prefect, paused, "approve")]}
    source = world.candle_vllm.path
    publish(world.registry_url, f"{ORG}/candle-vllm", tag, git_repo=source, commit="HEAD")

    def ended() -> bool:
        runs = {m: one_run(daily, prefect, m) for m in answered}
        for merge, run in runs.items():
            key = run.state.state_details.pause_key if run and state_of(run) == "Paused" else None
            if key and key not in answered[merge]:
                answered[merge].append(answer(prefect, run, "approve"))  # type: ignore[arg-type]
        return all(r and state_of(r) in FINAL for r in runs.values())

    wait_until(ended, timeout_s=420, what="both handoffs to end", every_s=2.0)
    done = [one_run(daily, prefect, m) for m in (waiting, other)]
    assert [state_of(r) for r in done] == ["Completed", "Completed"], done  # type: ignore[arg-type]
    for name, merge in (("clef-serve", waiting), ("coder-predictor", other)):
        annotations = service(kube, seeded, name).metadata.annotations
        ledger = parse_ledger(annotations)
        assert ledger is not None and ledger.phase == "done", (name, ledger)
        # Each ran its merge's own code: the worker's pull step cloned it and the run
        # imported the clone's modules, not the worker's copy (flows/running_code.py).
        ran = history_entries(annotations)[-1]["source"]
        code, root = Path(ran["code"]).resolve(), Path(ran["root"]).resolve()
        assert ran["commit"] == merge and code == root != REPO.resolve(), ran


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_merge_waits_for_its_services_turn_then_checks_it_is_still_the_newest(
    daily: DailyPath, prefect: PrefectServer, kube: Kube, seeded: str
) -> None:
    """While another handoff holds coder-predictor, two merges for it wait in line;
    when the Service is free, the newer one gets its turn and the older ends superseded."""
    with (
        temporary_settings({PREFECT_API_URL: prefect.api_url}),
        service_slot(seeded, "coder-predictor", resuming=False),
    ):
        older, _ = merge_spec_change(daily.repo, SPEC, into(seeded, 604), "coder: try")
        turn = "for Service coder-predictor's turn"
        wait_until(
            lambda: (r := one_run(daily, prefect, older)) and logged(prefect, r, turn),
            timeout_s=120,
            what="the older merge's run to wait for the Service's turn",
        )
        newer, _ = merge_spec_change(daily.repo, SPEC, into(seeded, 605), "coder: again")
        wait_until(
            lambda: (r := one_run(daily, prefect, newer)) and logged(prefect, r, turn),
            timeout_s=120,
            what="the newer merge's run to wait for the Service's turn",
        )
        assert state_of(one_run(daily, prefect, older)) == "Running"  # type: ignore[arg-type]
    paused = wait_until(
        lambda: (r := one_run(daily, prefect, newer)) and state_of(r) == "Paused" and r,
        timeout_s=180,
        what="the newer merge's run to get its turn and pause for approval",
    )
    answer(prefect, paused, "reject")

    def ended(merge: str) -> FlowRun | None:
        run = one_run(daily, prefect, merge)
        return run if run and state_of(run) in FINAL else None

    # Either may have had the turn first: the older one ends at once when it gets it.
    superseded = wait_until(lambda: ended(older), timeout_s=180, what="the older run to end")
    rejected = wait_until(lambda: ended(newer), timeout_s=180, what="the newer run to end")
    assert state_of(rejected) != "Completed", rejected.state
    assert state_of(superseded) == "Cancelled", superseded.state
    message = superseded.state.message or ""
    assert message.startswith("superseded") and newer[:12] in message
    records = history_entries(service(kube, seeded, "coder-predictor").metadata.annotations)
    assert [r["trigger"]["merge_commit"] for r in records] == [newer]
