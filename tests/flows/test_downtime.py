"""The in-place downtime a plan declares, part by part (pure), and the outage clock
that holds the flow to it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from flows.downtime import DEFAULT_GRACE_S, DEFAULT_START_S, SWAP_S, declare, recorded_starts
from flows.errors import GateFailed
from flows.outage import DowntimeExceeded, OutageClock, bounded
from flows.render import load_manifest
from flows.spec import HandoffSpec, load_spec

SPECS = Path(__file__).resolve().parents[2] / "manifests" / "handoffs"
REPO = "registry.local/candle-vllm"


def _coder(**approval: Any) -> HandoffSpec:
    spec = load_spec(SPECS / "coder-14b-fp16.yaml")
    return spec.model_copy(update={"approval": spec.approval.model_copy(update=approval)})


def _live(grace: int | None = None, startup: dict[str, int] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "candle", "readinessProbe": {"periodSeconds": 1}}
    if startup:
        container["startupProbe"] = startup
    pod: dict[str, Any] = {"containers": [container]}
    if grace is not None:
        pod["terminationGracePeriodSeconds"] = grace
    return pod


def _parts(spec: HandoffSpec, **kwargs: Any) -> dict[str, float]:
    declared = declare(spec, load_manifest(spec), [_live(grace=5)], **kwargs)
    return {p.name: p.seconds for p in declared.parts + declared.rollback}


def test_each_part_is_named_and_the_bound_adds_the_rollback() -> None:
    spec = _coder()
    declared = declare(
        spec, load_manifest(spec), [_live(grace=5)], candidate_starts=[], live_starts=[1.5]
    )
    parts = {p.name: p for p in declared.parts}
    assert list(parts) == [
        "old pods stop",
        "candidate pods start",
        "smoke gate",
        "task gate",
        "latency gate",
        "swap",
    ]
    assert parts["old pods stop"].seconds == 5 and "as set" in parts["old pods stop"].basis
    # No startupProbe and no start seen before: nothing bounds the start but the default.
    assert parts["candidate pods start"].seconds == DEFAULT_START_S
    assert parts["latency gate"].seconds == spec.gates.latency_budget_s
    assert spec.gates.task is not None and parts["task gate"].seconds == spec.gates.task.budget_s
    assert parts["swap"].seconds == SWAP_S
    assert declared.estimate_s == pytest.approx(sum(p.seconds for p in declared.parts))
    rollback = {p.name: p for p in declared.rollback}
    # The candidate sets no grace: Kubernetes' default; the old pods were seen starting.
    assert rollback["candidate pods stop"].seconds == DEFAULT_GRACE_S
    assert (
        rollback["old pods start"].seconds == 10.0
        and "observed" in rollback["old pods start"].basis
    )
    assert declared.bound_s == pytest.approx(declared.estimate_s + DEFAULT_GRACE_S + 10.0)
    text = declared.markdown()
    assert all(name in text for name in [*parts, *rollback])


def test_this_images_earlier_starts_replace_the_default() -> None:
    history = [
        {"image": f"{REPO}@sha256:aa", "candidate_start_s": 4.0},
        {"image": "registry.local/other@sha256:bb", "candidate_start_s": 99.0},
        {"image": f"{REPO}@sha256:cc", "candidate_start_s": 6.5},
        {"image": f"{REPO}@sha256:dd"},
    ]
    starts = recorded_starts(history, REPO)
    assert starts == [4.0, 6.5]
    assert _parts(_coder(), candidate_starts=starts, live_starts=[])["candidate pods start"] == 13.0


def test_a_startup_probe_caps_the_start() -> None:
    spec = _coder()
    manifest = load_manifest(spec)
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["startupProbe"] = {"periodSeconds": 2, "failureThreshold": 10}
    declared = declare(spec, manifest, [_live()], candidate_starts=[], live_starts=[])
    start = next(p for p in declared.parts if p.name == "candidate pods start")
    assert start.seconds == 2 * 10 + 1 and "startupProbe" in start.basis
    seen = declare(spec, manifest, [_live()], candidate_starts=[30.0], live_starts=[])
    assert next(p for p in seen.parts if p.name == "candidate pods start").seconds == 21


def test_a_look_during_the_outage_is_declared_with_its_timeout() -> None:
    without = _parts(_coder(), candidate_starts=[], live_starts=[])
    looked = _parts(
        _coder(during_outage=True, outage_timeout_s=45), candidate_starts=[], live_starts=[]
    )
    assert looked.pop("a person's look at the gates") == 45
    assert looked == without


def test_the_outage_clock_cuts_waits_and_rolls_back_once_spent() -> None:
    clock = OutageClock(started=time.time() - 8, estimate_s=10, bound_s=20)
    assert 1.5 < clock.limit(60) <= 2.0 and clock.limit(1) == 1
    clock.check("gates")  # two seconds are left
    with pytest.raises(GateFailed), bounded(clock, "gates"):
        raise GateFailed("parity fail")  # within the estimate: the failure itself
    spent = OutageClock(started=time.time() - 11, estimate_s=10, bound_s=20)
    with pytest.raises(DowntimeExceeded, match="no endpoints for 11 s"):
        spent.check("swap")
    with pytest.raises(DowntimeExceeded, match="parity fail"), bounded(clock, "gates"):
        clock.started -= 5
        raise GateFailed("parity fail")
    assert clock.end() >= 13 and not clock.running and clock.limit(60) == 60


def test_a_wait_for_capacity_is_declared_with_its_setting() -> None:
    spec = _coder()
    spec = spec.model_copy(
        update={"candidate": spec.candidate.model_copy(update={"capacity_wait_s": 90})}
    )
    parts = _parts(spec, candidate_starts=[], live_starts=[])
    assert parts["waiting for capacity"] == 90
