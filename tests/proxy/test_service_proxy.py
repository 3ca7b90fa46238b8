"""The whole proxy, fed Service and EndpointSlice changes as its informers post them (no
API server): new connections go to ready endpoints, never to a terminating one while a
ready one exists, and to a terminating one that still serves only when none is ready;
changes reach the listeners in syncs paced as kube-proxy's (a burst of 2, then one per
min sync period), and `proxy.json` shows what was applied, not what was seen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from sandbox.kubelet.runtime import ContainerRuntime, PodTable, RunningPod
from sandbox.proxy.addresses import read_addresses
from sandbox.proxy.service_proxy import (
    SERVICES,
    SLICES,
    Change,
    ProxySettings,
    ServiceProxy,
    SyncLimiter,
)
from tests.kubelet_server.webproc import http_process

IPS = {"a": "10.244.0.1", "b": "10.244.0.2"}
SERVICE = {
    "metadata": {"namespace": "ns", "name": "svc"},
    "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]},
}


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    """pod-ports.json with pods a and b, each serving name.txt with its own name."""
    table = PodTable(tmp_path / "pod-ports.json")
    with ExitStack() as stack:
        for name, ip in IPS.items():
            site = tmp_path / name
            site.mkdir()
            (site / "name.txt").write_text(name)
            port = stack.enter_context(http_process(site, tmp_path / f"{name}.log"))
            runtime = ContainerRuntime(Path("/dev/null"), None, {8080: port}, running=True)
            table.put("ns", name, RunningPod(f"uid-{name}", ip, "n1", {"server": runtime}))
        yield tmp_path


def _slice(**conditions: dict[str, bool]) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": "svc-x1",
            "labels": {"kubernetes.io/service-name": "svc"},
        },
        "endpoints": [
            {"addresses": [IPS[name]], "conditions": c} for name, c in conditions.items()
        ],
        "ports": [{"name": "http", "port": 8080}],
    }


async def _get(address: str) -> str | None:
    host, port = address.split(":")
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /name.txt HTTP/1.0\r\n\r\n")
        response = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        return response.split(b"\r\n\r\n", 1)[1].decode()
    except (ConnectionError, IndexError):
        return None


async def _applied(run_dir: Path, backends: set[str], timeout_s: float = 10.0) -> float:
    """Wait until proxy.json shows exactly these backends; the monotonic time it did."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listed = read_addresses(run_dir)
        if listed and set(listed[0].backends) == backends:
            return time.monotonic()
        await asyncio.sleep(0.01)
    raise AssertionError(f"never applied {backends}: {read_addresses(run_dir)}")


class _Running:
    def __init__(self, run_dir: Path, settings: ProxySettings) -> None:
        self.proxy = ServiceProxy(run_dir, settings)
        self.post = self.proxy.poster(asyncio.get_running_loop())
        self.task = asyncio.create_task(self.proxy.run(on_ready=lambda: None))

    def slices(self, *slices: dict[str, Any]) -> None:
        self.post(Change(SLICES, listing=list(slices)))

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.proxy.close()


def test_terminating_endpoint_only_when_no_ready_one(run_dir: Path) -> None:
    ready, not_ready = {"ready": True}, {"ready": False}
    terminating = {"ready": False, "serving": True, "terminating": True}
    gone = {"ready": False, "serving": False, "terminating": True}

    async def scenario() -> list[list[str | None]]:
        running = _Running(run_dir, ProxySettings(min_sync_period_s=0))
        try:
            running.post(Change(SERVICES, listing=[SERVICE]))
            seen = []
            for conditions, backends in (
                ({"a": ready, "b": terminating}, {"10.244.0.1:8080"}),
                ({"a": not_ready, "b": terminating}, {"10.244.0.2:8080"}),
                ({"a": not_ready, "b": gone}, set()),
            ):
                running.slices(_slice(**conditions))
                await _applied(run_dir, backends)
                address = read_addresses(run_dir)[0].address
                seen.append([await _get(address) for _ in range(20)])
            return seen
        finally:
            await running.stop()

    while_ready, only_terminating, none = asyncio.run(scenario())
    assert while_ready == ["a"] * 20  # b is terminating: never chosen while a is ready
    assert only_terminating == ["b"] * 20  # no ready endpoint: the terminating one serves
    assert none == [None] * 20  # terminating and no longer serving: reset


def test_sync_limiter_paces_like_kube_proxy() -> None:
    now = [0.0]
    limiter = SyncLimiter(1.0, 2, clock=lambda: now[0])
    delays = []
    for _ in range(3):
        delays.append(limiter.delay_s())
        if delays[-1] == 0:
            limiter.take()
    assert delays == [0.0, 0.0, 1.0]  # a burst of two, then one per period
    now[0] = 0.4
    assert limiter.delay_s() == pytest.approx(0.6)
    now[0] = 10.0
    assert limiter.delay_s() == 0.0
    assert SyncLimiter(0.0, 2).delay_s() == 0.0  # 0: every change synced at once


def test_changes_reach_the_listeners_after_the_min_sync_period(run_dir: Path) -> None:
    a, b = {"a": {"ready": True}}, {"b": {"ready": True}}

    async def scenario() -> list[float]:
        running = _Running(run_dir, ProxySettings(min_sync_period_s=1.0))
        try:
            running.post(Change(SERVICES, listing=[SERVICE]))
            running.slices(_slice(**a))
            await _applied(run_dir, {"10.244.0.1:8080"})
            await asyncio.sleep(2.1)  # the bucket refills: two syncs may run at once
            lags = []
            for conditions, backends in ((b, "10.244.0.2:8080"), (a, "10.244.0.1:8080")) * 2:
                posted = time.monotonic()
                running.slices(_slice(**conditions))
                lags.append(await _applied(run_dir, {backends}) - posted)
            return lags
        finally:
            await running.stop()

    lags = asyncio.run(scenario())
    assert max(lags[:2]) < 0.5, lags  # the burst: applied at once
    assert all(lag >= 0.5 for lag in lags[2:]), lags  # then one sync per second
