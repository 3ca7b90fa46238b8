"""The ledger annotation reads back exactly what was written."""

from __future__ import annotations

from flows.ledger import ANNOTATION, Ledger, Phase, Snapshot, WorkloadSnapshot, parse_ledger


def test_a_snapshot_without_a_cluster_ip_reads_back() -> None:
    # A Service may have no clusterIP (type ExternalName); dump() leaves None out.
    ledger = Ledger(
        handoff_id="h-1",
        spec="specs/clef.yaml",
        phase=Phase.STARTED,
        strategy="side-by-side",
        snapshot=Snapshot(
            selector={"app": "old"},
            cluster_ip=None,
            workloads=[WorkloadSnapshot(name="old", replicas=1, resource_version="7")],
        ),
        started_at="2026-12-02T00:00:00Z",
        updated_at="2026-12-02T00:00:00Z",
    )
    assert parse_ledger({ANNOTATION: ledger.dump()}) == ledger
