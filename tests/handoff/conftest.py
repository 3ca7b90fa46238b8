"""Every handoff test on the seeds' world is watched for the Service invariants (I1-I3,
tests/invariants.py): while a test that uses `seeded` runs, a monitor reads each of the
namespace's client-facing Services every 100 ms, and the test fails when one broke an
invariant. A test declares what it does on purpose with a marker:

- `@pytest.mark.outage_window(reason)`: an in-place handoff; a Service may have no ready
  address only inside the outages the handoffs declared in its ledger.
- `@pytest.mark.invariants(reason, allow=("I1", "I3"), services=(...))`: the test breaks
  those invariants of those Services (all, unless named) itself, e.g. it deletes the
  Service or scales its only workload to 0.

Setup helpers that empty a Service on purpose before the handoff (SETUP_OUTAGES) run
inside an allowed window of their own.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from flows.kube.client import Kube, connect
from sandbox.seed import CLIENT_API
from tests.invariants import ServiceMonitor

# The seeds' Services that clients reach.
SERVICES = tuple(CLIENT_API)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "outage_window(reason): an in-place handoff; its Service may be empty inside the "
        "outages the handoff declared in its ledger (tests/invariants.py)",
    )
    config.addinivalue_line(
        "markers",
        "invariants(reason, allow=('I1', 'I3'), services=()): the test breaks these Service "
        "invariants on purpose (tests/invariants.py)",
    )


def _monitor(item: pytest.Item, kube: Kube, namespace: str, service: str) -> ServiceMonitor:
    monitor = ServiceMonitor(
        kube,
        namespace,
        service,
        honour_declared_outages=item.get_closest_marker("outage_window") is not None,
    )
    for mark in item.iter_markers("invariants"):
        services = mark.kwargs.get("services") or SERVICES
        if service not in services:
            continue
        reason = str(mark.kwargs.get("reason") or (mark.args[0] if mark.args else ""))
        assert reason, f"{item.nodeid}: @pytest.mark.invariants needs a reason"
        monitor.allow(*(mark.kwargs.get("allow") or ("I1", "I3")), reason=reason)
    return monitor


# Steps of a test's own setup (helpers the test modules call) that take a Service's
# ready addresses away on purpose, before any handoff: each runs inside an allowed-empty
# window of that Service's monitor, closed once the routes have caught up.
SETUP_OUTAGES = {
    "users_changed_the_coder": (
        "coder-predictor",
        "the users' kubectl apply rolls the coder Deployment out (Recreate strategy)",
    ),
    "live_server_aborts_after_sigterm": (
        "clef-serve",
        "the live Deployment rolls out with --shutdown-timeout (Recreate strategy)",
    ),
}


def _declared_setup_steps(
    item: pytest.Item, monitors: dict[str, ServiceMonitor], patch: pytest.MonkeyPatch
) -> None:
    module = getattr(item, "module", None)
    for name, (service, reason) in SETUP_OUTAGES.items():
        step = getattr(module, name, None)
        if step is None:
            continue

        patch.setattr(module, name, _inside_window(step, monitors[service], reason))


def _inside_window(step: Any, monitor: ServiceMonitor, reason: str) -> Any:
    def declared(*args: Any, **kwargs: Any) -> Any:
        with monitor.allow_empty(reason):
            result = step(*args, **kwargs)
            monitor.wait_ready()
        return result

    return declared


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Around the test's body (its fixtures, `seeded` included, are up): watch, then check
    before the fixtures tear the namespace down. Only a test that passed is checked: one
    that failed already says why."""
    funcargs = getattr(item, "funcargs", {})
    namespace = funcargs.get("seeded")
    if not isinstance(namespace, str) or os.environ.get("HANDOFF_TEST_INVARIANTS") == "off":
        return (yield)  # off: only to tell whether the monitor changes what a test sees
    kube = connect(funcargs["sandbox"].kubeconfig)
    monitors = {s: _monitor(item, kube, namespace, s) for s in SERVICES}
    patch = pytest.MonkeyPatch()
    try:
        _declared_setup_steps(item, monitors, patch)
        for monitor in monitors.values():
            monitor.start()
        result = yield
    except BaseException:
        for monitor in monitors.values():  # evidence for the failure, shown with it
            monitor.stop()
            print(f"routes of {monitor.service} (invariants unchecked: the test failed):")
            print("\n".join(monitor.timeline()))
        raise
    finally:
        patch.undo()
        for monitor in monitors.values():
            monitor.stop()
        kube.close()
    for monitor in monitors.values():
        print(f"invariants of {monitor.service}: {monitor.summary()}")
    broken = [m.report(found) for m in monitors.values() if (found := m.violations())]
    if broken:
        raise AssertionError("\n\n".join(broken))
    return result
