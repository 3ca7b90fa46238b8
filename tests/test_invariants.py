"""The Service invariant monitor (tests/invariants.py) on the sandbox's control plane: it
passes on a Service nobody touches and on a plain selector swap, and fails a Service whose
selector selects nothing (I1, and I3 when it stays so) or the pods of two Deployments at
once for a few seconds (I2). The tests share one seeded namespace, each putting the
Service's selector back as it found it."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from flows.kube import read
from flows.kube.client import Kube
from tests.invariants import SWAP_GRACE_S, Sample, ServiceMonitor

SERVICE = "clef-serve"


def _select(kube: Kube, namespace: str, selector: dict[str, str | None]) -> None:
    kube.core.patch_namespaced_service(SERVICE, namespace, {"spec": {"selector": selector}})


def _until(
    monitor: ServiceMonitor, what: str, check: Callable[[Sample], bool], timeout_s: float = 30
) -> None:
    """Until the monitor's last good sample satisfies check (a callable)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        good = [s for s in monitor.samples if s.ok]
        if good and check(good[-1]):
            return
        time.sleep(0.1)
    raise AssertionError(f"the Service never showed {what}: {monitor.timeline()[-5:]}")


def _invariants(monitor: ServiceMonitor) -> list[str]:
    return sorted({v.invariant for v in monitor.violations()})


def test_an_untouched_service_passes(kube: Kube, seeded_for_module: str) -> None:
    with ServiceMonitor(kube, seeded_for_module, SERVICE) as monitor:
        time.sleep(3)
    assert monitor.had_ready_at_start
    assert len(monitor.samples) >= 15, monitor.summary()
    assert all(s.ok and s.workloads == {"clef-serve"} for s in monitor.samples), monitor.timeline()


def test_a_selector_swap_is_one_instant(kube: Kube, seeded_for_module: str) -> None:
    """What a handoff's swap does to the routes, measured: the selector moved from one
    Deployment's ready pods to another's (and back) five times. SWAP_GRACE_S is chosen
    from this: the EndpointSlice controller rewrites the slice in one update."""
    with ServiceMonitor(kube, seeded_for_module, SERVICE) as monitor:
        for _ in range(5):
            _select(kube, seeded_for_module, {"app": "candle-vllm"})
            _until(monitor, "candle-vllm", lambda s: s.workloads == {"candle-vllm"})
            time.sleep(0.5)
            _select(kube, seeded_for_module, {"app": "clef-serve"})
            _until(monitor, "clef-serve", lambda s: s.workloads == {"clef-serve"})
            time.sleep(0.5)
    summary = monitor.summary()
    print(f"\nselector swaps, 10 transitions: {summary}")
    assert summary["empty_samples"] == 0, monitor.timeline()
    assert all(x <= SWAP_GRACE_S for x in summary["mixed_stretches_s"]), monitor.timeline()


def test_a_selector_that_selects_nothing_breaks_i1(kube: Kube, seeded_for_module: str) -> None:
    monitor = ServiceMonitor(kube, seeded_for_module, SERVICE).start()
    try:
        _select(kube, seeded_for_module, {"app": "nothing"})
        _until(monitor, "no ready address", lambda s: s.ready == 0)
        time.sleep(0.5)
        _select(kube, seeded_for_module, {"app": "clef-serve"})
        _until(monitor, "clef-serve again", lambda s: s.workloads == {"clef-serve"})
    finally:
        monitor.stop()
    assert _invariants(monitor) == ["I1"], monitor.timeline()
    with pytest.raises(AssertionError, match=r"I1 at .*no ready address") as raised:
        monitor.check()
    assert "selector=app=nothing" in str(raised.value), str(raised.value)


def test_a_service_left_empty_breaks_i1_and_i3_unless_declared(
    kube: Kube, seeded_for_module: str
) -> None:
    monitor = ServiceMonitor(kube, seeded_for_module, SERVICE).start()
    try:
        _select(kube, seeded_for_module, {"app": "nothing"})
        _until(monitor, "no ready address", lambda s: s.ready == 0)
    finally:
        monitor.stop()
        _select(kube, seeded_for_module, {"app": "clef-serve"})  # as the next test expects
    assert _invariants(monitor) == ["I1", "I3"], monitor.timeline()
    monitor.allow_outage("the test empties the Service on purpose")
    monitor.check()


def test_an_empty_stretch_inside_a_declared_window_passes(
    kube: Kube, seeded_for_module: str
) -> None:
    with (
        ServiceMonitor(kube, seeded_for_module, SERVICE) as monitor,
        monitor.allow_empty("as an in-place handoff's outage"),
    ):
        _select(kube, seeded_for_module, {"app": "nothing"})
        _until(monitor, "no ready address", lambda s: s.ready == 0)
        _select(kube, seeded_for_module, {"app": "clef-serve"})
        _until(monitor, "clef-serve again", lambda s: s.workloads == {"clef-serve"})
    assert any(s.ok and s.ready == 0 for s in monitor.samples)


def test_two_deployments_selected_together_break_i2(kube: Kube, seeded_for_module: str) -> None:
    # One pod of each Deployment carries a label the Service then selects.
    for app in ("clef-serve", "candle-vllm"):
        (pod,) = read.list_pods(kube, seeded_for_module, {"app": app})
        kube.core.patch_namespaced_pod(
            pod.name, seeded_for_module, {"metadata": {"labels": {"mix": "yes"}}}
        )
    monitor = ServiceMonitor(kube, seeded_for_module, SERVICE).start()
    try:
        _select(kube, seeded_for_module, {"app": None, "mix": "yes"})
        _until(monitor, "both", lambda s: s.workloads == {"clef-serve", "candle-vllm"})
        time.sleep(SWAP_GRACE_S + 1.5)
        _select(kube, seeded_for_module, {"app": "clef-serve", "mix": None})
        _until(monitor, "clef-serve alone", lambda s: s.workloads == {"clef-serve"})
    finally:
        monitor.stop()
    assert _invariants(monitor) == ["I2"], monitor.timeline()
    with pytest.raises(AssertionError, match=r"I2 at .*two Deployments listed together"):
        monitor.check()
    monitor.allow_mixed("the test selects both on purpose")
    monitor.check()


@pytest.mark.parametrize(("answered", "broken"), [(1.3, False), (1.1, True)])
def test_an_empty_read_is_judged_by_when_it_was_sent_and_answered(
    answered: float, broken: bool
) -> None:
    """A read of the routes sent just before a declared window opened and answered inside
    it (a loaded API server answers late) may show the window's first moment: no break.
    Answered before the window opened, the emptiness it shows lies outside: a break. The
    samples alone are judged (no cluster)."""
    monitor = ServiceMonitor(None, "judged-only", SERVICE)  # type: ignore[arg-type]
    monitor.had_ready_at_start = True
    monitor.samples += [
        Sample(at=0.0, ready=1, workloads=frozenset({SERVICE}), until=0.05),
        Sample(at=1.0, ready=0, until=answered),
        Sample(at=2.0, ready=1, workloads=frozenset({"clef-candle"}), until=2.05),
    ]
    monitor.allow_empty_during([(1.2, 1.9)], "declared by the test")
    assert (_invariants(monitor) == ["I1"]) is broken, monitor.timeline()
