"""One control plane of their own for the Kubernetes-boundary tests (an API server that
tests may restart, webhooks that only these tests register)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox import controlplane
from tests.lease.test_lease import admin, ns

__all__ = ["admin", "ns"]  # the Lease tests' client and namespace fixtures, on this plane


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.ControlPlane]:
    started = controlplane.start(tmp_path_factory.mktemp("kube-cp"))
    yield started
    controlplane.stop(started)
