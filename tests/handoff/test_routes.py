"""The swap is proven on the EndpointSlices data planes route by, not on Endpoints alone:
while another controller's EndpointSlice (a mesh's, say) still routes the Service to the
reference pod, the handoff waits and the reference keeps running; once that slice is
gone it retires the reference and finishes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flows.kube.client import Kube
from flows.ledger import REVISION_LABEL, parse_ledger
from tests.endpoint_slices import create_slice, delete_slice
from tests.world import handoff_process, service, spec_in

MESH_SLICE = "clef-serve-mesh"
SETTLE_S = 5.0  # well past when a flow reading only Endpoints would retire the reference


def _reference_slice(kube: Kube, namespace: str) -> str:
    """A slice outside the EndpointSlice controller routing clef-serve to its pod."""
    pod = kube.core.list_namespaced_pod(namespace, label_selector="app=clef-serve").items[0]
    ref = {"kind": "Pod", "namespace": namespace, "name": pod.metadata.name}
    return create_slice(
        kube.api,
        namespace,
        name=MESH_SLICE,
        service="clef-serve",
        endpoints=[
            {"addresses": [pod.status.pod_ip], "conditions": {"ready": True}, "targetRef": ref}
        ],
        port_names=("http", "http-8080"),
    )


@pytest.mark.invariants(
    reason="another controller's EndpointSlice keeps routing to the reference through the swap",
    allow=("I2",),
    services=("clef-serve",),
)
def test_reference_is_retired_only_once_no_endpoint_slice_routes_to_it(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    version = _reference_slice(kube, seeded)
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates={"parity": None, "latency": None})
    with handoff_process(spec_file, handoff_env, "--auto-approve") as process:
        deadline = time.monotonic() + 180
        while REVISION_LABEL not in (service(kube, seeded, "clef-serve").spec.selector or {}):
            assert process.poll() is None, process.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the selector was never switched"
            time.sleep(0.2)
        time.sleep(SETTLE_S)
        assert process.poll() is None, process.communicate()[0][-3000:]
        reference = kube.apps.read_namespaced_deployment("clef-serve", seeded)
        assert reference.spec.replicas == 1, "retired while a slice still routes to it"
        delete_slice(kube.api, seeded, MESH_SLICE, version)
        output, _ = process.communicate(timeout=180)
    assert process.returncode == 0, output[-3000:]
    ledger = parse_ledger(service(kube, seeded, "clef-serve").metadata.annotations)
    assert ledger is not None and ledger.phase == "done"
    assert kube.apps.read_namespaced_deployment("clef-serve", seeded).spec.replicas == 0
