"""Inside a cluster the flow reaches pods at their IP, unless told its pod network is
out of reach (the sandbox's pod IPs are never routed): then it port-forwards, as outside."""

from __future__ import annotations

import pytest
from kubernetes import client

from flows.kube.client import Kube
from flows.kube.portforward import POD_ACCESS_ENV, dials_pod_ip


def test_in_cluster_the_flow_dials_pod_ips_unless_told_to_port_forward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inside, outside = Kube(client.ApiClient(), in_cluster=True), Kube(client.ApiClient())
    monkeypatch.delenv(POD_ACCESS_ENV, raising=False)
    assert dials_pod_ip(inside) and not dials_pod_ip(outside)
    monkeypatch.setenv(POD_ACCESS_ENV, "port-forward")
    assert not dials_pod_ip(inside) and not dials_pod_ip(outside)
    monkeypatch.setenv(POD_ACCESS_ENV, "tunnel")
    with pytest.raises(ValueError, match="HANDOFF_POD_ACCESS='tunnel'"):
        dials_pod_ip(inside)
