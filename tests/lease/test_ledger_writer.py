"""A run writes its ledger only over what it last wrote: when another writer moved the
ledger meanwhile (a `handoff rollback` by hand, another run that took over and ended),
the run stops with both named instead of recording its phase over theirs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.errors import PermanentError
from flows.kube.client import Kube
from flows.ledger import Ledger, Phase, Snapshot
from flows.ledger_store import now_iso, read_ledger, save_ledger
from flows.spec import HandoffSpec, load_spec
from tests.kube.test_spec_fuzz import valid_spec
from tests.lease.test_lease import SERVICE, admin, ns, plane

__all__ = ["admin", "ns", "plane"]  # the control plane fixtures, shared
pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def spec(ns: str, tmp_path: Path) -> HandoffSpec:
    spec_file = tmp_path / "writer.yaml"
    spec_file.write_text(yaml.safe_dump({**valid_spec(ns, SERVICE), "name": "writer"}))
    return load_spec(spec_file)


def _ledger(handoff_id: str, phase: Phase) -> Ledger:
    now = now_iso()
    return Ledger(
        handoff_id=handoff_id,
        spec="writer",
        phase=phase,
        strategy="side-by-side",
        snapshot=Snapshot(selector={"app": "old"}, cluster_ip="10.0.0.10", workloads=[]),
        started_at=now,
        updated_at=now,
    )


def test_a_run_records_its_phases_over_its_own_writes(admin: Kube, spec: HandoffSpec) -> None:
    mine = save_ledger(admin, spec, _ledger("run-a", Phase.STARTED))
    mine = save_ledger(admin, spec, mine.to(Phase.APPLIED), since=mine)
    save_ledger(admin, spec, mine.to(Phase.WARM), since=mine)
    on_cluster = read_ledger(admin, spec)
    assert on_cluster is not None and on_cluster.phase is Phase.WARM


@pytest.mark.parametrize("other", ["a rollback by hand", "another run that ended"])
def test_a_ledger_moved_by_another_writer_stops_the_run(
    admin: Kube, spec: HandoffSpec, other: str
) -> None:
    mine = save_ledger(admin, spec, _ledger("run-a", Phase.STARTED))
    mine = save_ledger(admin, spec, mine.to(Phase.APPLIED), since=mine)
    # Meanwhile: run-a rolled back by hand (its Lease had expired), and maybe a new run
    # took the Service and ended.
    moved = mine.to(Phase.ROLLING_BACK, cause="by hand").to(Phase.ROLLED_BACK)
    save_ledger(admin, spec, moved)
    if other == "another run that ended":
        moved = save_ledger(admin, spec, _ledger("run-b", Phase.DONE))
    with pytest.raises(PermanentError, match="another writer moved it") as stopped:
        save_ledger(admin, spec, mine.to(Phase.WARM), since=mine)
    assert "run-a" in str(stopped.value) and moved.phase in str(stopped.value)
    on_cluster = read_ledger(admin, spec)
    assert on_cluster is not None
    assert (on_cluster.handoff_id, on_cluster.phase) == (moved.handoff_id, moved.phase)
