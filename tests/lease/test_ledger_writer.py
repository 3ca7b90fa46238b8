"""A run writes its ledger only over what it last wrote: when another writer moved the
ledger meanwhile (a `handoff rollback` by hand, another run that took over and ended),
the run stops with both named instead of recording its phase over theirs. Its own write
retried after the answer was lost (applied, but the run never heard so) is its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from flows.errors import PermanentError
from flows.kube.client import Kube, connect
from flows.ledger import Ledger, Phase, Snapshot
from flows.ledger_store import now_iso, read_ledger, save_ledger
from flows.spec import HandoffSpec, load_spec
from sandbox import controlplane
from tests.kube.test_spec_fuzz import valid_spec
from tests.lease.lost_answer import LossyRelay, lossy_relay
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


@pytest.fixture
def relayed(plane: controlplane.ControlPlane, tmp_path: Path) -> Iterator[tuple[Kube, LossyRelay]]:
    """A client that reaches the API server through a relay that can lose an answer."""
    with lossy_relay(urlsplit(plane.server).port or 443) as relay:
        kubeconfig = tmp_path / "relayed.kubeconfig"
        kubeconfig.write_text(
            plane.kubeconfig.read_text().replace(plane.server, f"https://127.0.0.1:{relay.port}")
        )
        kube = connect(kubeconfig)
        yield kube, relay
        kube.close()


def _losing_the_answer(relay: LossyRelay, after: Callable[[], None]) -> Callable[[], None]:
    """A fence (every write passes it right before it is sent) that has the relay lose the
    answer to the first write, then calls `after` once, before that write is sent again."""
    called: list[bool] = []

    def fence() -> None:
        if relay.dropped == 0:
            relay.drop_next_answer()
        elif not called:
            called.append(True)
            after()

    return fence


def test_the_runs_own_write_retried_after_its_answer_was_lost_is_its_own(
    admin: Kube, spec: HandoffSpec, relayed: tuple[Kube, LossyRelay]
) -> None:
    kube, relay = relayed
    mine = save_ledger(admin, spec, _ledger("run-a", Phase.STARTED))
    applied: list[Ledger | None] = []
    run = dataclasses.replace(
        kube, fence=_losing_the_answer(relay, lambda: applied.append(read_ledger(admin, spec)))
    )
    written = save_ledger(run, spec, mine.to(Phase.APPLIED), since=mine)
    assert relay.dropped == 1, "no answer was lost"
    # The lost answer's write was applied: the retry found the run's own stamp.
    assert applied == [written], applied
    on_cluster = read_ledger(admin, spec)
    assert on_cluster == written and on_cluster.phase is Phase.APPLIED
    save_ledger(admin, spec, written.to(Phase.WARM), since=written)  # and the run goes on


def test_another_writer_between_the_lost_answer_and_the_retry_stops_the_run(
    admin: Kube, spec: HandoffSpec, relayed: tuple[Kube, LossyRelay]
) -> None:
    kube, relay = relayed
    mine = save_ledger(admin, spec, _ledger("run-a", Phase.STARTED))
    moved: list[Ledger] = []

    def rollback_by_hand() -> None:
        found = read_ledger(admin, spec)
        assert found is not None and found.phase is Phase.APPLIED  # the lost answer's write
        ended = found.to(Phase.ROLLING_BACK, cause="by hand").to(Phase.ROLLED_BACK)
        moved.append(save_ledger(admin, spec, ended))

    run = dataclasses.replace(kube, fence=_losing_the_answer(relay, rollback_by_hand))
    with pytest.raises(PermanentError, match="another writer moved it"):
        save_ledger(run, spec, mine.to(Phase.APPLIED), since=mine)
    assert relay.dropped == 1 and moved, "no answer was lost, or nobody wrote in between"
    assert read_ledger(admin, spec) == moved[0]
