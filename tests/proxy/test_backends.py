"""A Service port leads to the ready endpoints of its EndpointSlices' port with the same
name (as kube-proxy matches them; every slice of the Service together, each endpoint by
its first address, duplicates once), only TCP, never for headless or ExternalName Services;
terminating endpoints that still serve only when no endpoint is ready;
pod IPs are looked up in the kubelet's pod-ports.json, re-read when it is replaced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sandbox.proxy.backends import (
    Backend,
    PodPorts,
    ServicePort,
    ready_backends,
    routable_backends,
    service_ports,
)


def _service(ports: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"spec": {"clusterIP": "10.96.0.10", "ports": ports, **spec}}


@pytest.mark.parametrize(
    ("service", "expected"),
    [
        (_service([{"port": 80}]), [ServicePort(name="", port=80)]),
        (
            _service(
                [{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]
            ),
            [ServicePort(name="http", port=80)],
        ),
        (_service([{"port": 80}], clusterIP="None"), []),
        (_service([{"port": 80}], type="ExternalName", clusterIP=""), []),
    ],
)
def test_service_ports(service: dict[str, Any], expected: list[ServicePort]) -> None:
    assert service_ports(service) == expected


SLICES = [
    {
        "endpoints": [
            {"addresses": ["10.244.0.1"], "conditions": {"ready": True}},
            {"addresses": ["10.244.0.2", "10.244.9.9"]},  # ready unset: ready
            {"addresses": ["10.244.0.3"], "conditions": {"ready": False}},
        ],
        "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}],
    },
    {
        "endpoints": [
            {"addresses": ["10.244.0.4"], "conditions": {"ready": True}},
            {"addresses": ["10.244.0.1"], "conditions": {"ready": True}},
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    },
]


@pytest.mark.parametrize(
    ("slices", "port_name", "expected"),
    [
        (SLICES, "http", ["10.244.0.1:8080", "10.244.0.2:8080", "10.244.0.4:8080"]),
        (SLICES, "metrics", ["10.244.0.1:9090", "10.244.0.2:9090"]),
        (SLICES, "", []),
        (
            [{"endpoints": [{"addresses": ["10.244.0.5"]}], "ports": [{"port": 80}]}],
            "",
            ["10.244.0.5:80"],
        ),
        ([{"endpoints": None, "ports": [{"name": "http", "port": 80}]}], "http", []),
        ([{"endpoints": [{"addresses": ["10.244.0.6"]}], "ports": None}], "http", []),
        ([], "http", []),
    ],
)
def test_ready_backends(slices: list[dict[str, Any]], port_name: str, expected: list[str]) -> None:
    assert [str(b) for b in ready_backends(slices, port_name)] == expected


def test_pod_ports_follow_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pod-ports.json"
    ports = PodPorts(path)
    backend = Backend(ip="10.244.0.1", port=8080)
    assert ports.local_port(backend) is None
    for local in (41000, 42000):
        tmp = tmp_path / "pod-ports.tmp"
        tmp.write_text(json.dumps({"10.244.0.1": {"8080": local}}))
        tmp.replace(path)  # as the kubelet writes it
        assert ports.local_port(backend) == local


def _endpoint(ip: str, **conditions: bool) -> dict[str, Any]:
    return {"addresses": [ip], "conditions": conditions}


@pytest.mark.parametrize(
    ("endpoints", "expected"),
    [
        # A terminating endpoint that still serves is not chosen while a ready one exists ...
        (
            [
                _endpoint("10.244.0.1", ready=True),
                _endpoint("10.244.0.2", ready=False, serving=True, terminating=True),
            ],
            ["10.244.0.1:8080"],
        ),
        # ... and is the only route left when none is ready (ProxyTerminatingEndpoints).
        (
            [
                _endpoint("10.244.0.1", ready=False),
                _endpoint("10.244.0.2", ready=False, serving=True, terminating=True),
                _endpoint("10.244.0.3", ready=False, serving=False, terminating=True),
            ],
            ["10.244.0.2:8080"],
        ),
        # Terminating and no longer serving: no route at all.
        ([_endpoint("10.244.0.3", ready=False, serving=False, terminating=True)], []),
        # `serving` unset is read as `ready` (slices written before the condition existed).
        ([_endpoint("10.244.0.4", ready=False, terminating=True)], []),
        ([_endpoint("10.244.0.5", terminating=True)], ["10.244.0.5:8080"]),
    ],
)
def test_routable_backends_use_terminating_endpoints_only_without_a_ready_one(
    endpoints: list[dict[str, Any]], expected: list[str]
) -> None:
    slices = [{"endpoints": endpoints, "ports": [{"name": "http", "port": 8080}]}]
    assert [str(b) for b in routable_backends(slices, "http")] == expected
