"""Only the newest merge for a Service is handed off: merges are ordered by merge time,
then by arrival at the relay; an older merge (or one whose event cannot be found) is
superseded, a merge of the same commit is not, and a run started by hand always goes."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.newest import compute_newest, ensure_newest
from flows.report.record import Trigger
from flows.webhook.events import MergeEvent, ReceivedMerge
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import deliver, outcome_of
from tests.webhook.servers import PrefectServer
from tests.webhook.specrepo import SpecRepo
from tests.webhook.test_relay import ALPHA_MANIFEST, pushed

T0 = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)


def _merge(
    commit: str, *, merged_s: float | None, received_s: float, spec: str = "a"
) -> ReceivedMerge:
    merged_at = T0 + dt.timedelta(seconds=merged_s) if merged_s is not None else None
    return ReceivedMerge(
        id=uuid.uuid4(),
        occurred=T0 + dt.timedelta(seconds=received_s),
        merge=MergeEvent(
            spec=spec,
            spec_file=f"{spec}.yaml",
            namespace="ns",
            service="svc",
            delivery_id=f"d-{commit}",
            merge_commit=commit * 40,
            merged_at=merged_at,
            repository="o/r",
            branch="main",
            source="forgejo",
            kind="push",
            changed=[],
        ),
    )


@pytest.mark.parametrize(
    ("ours", "others", "newest"),
    [
        (_merge("1", merged_s=0, received_s=0), [], True),
        (_merge("1", merged_s=0, received_s=0), [_merge("2", merged_s=5, received_s=5)], False),
        (_merge("2", merged_s=5, received_s=5), [_merge("1", merged_s=0, received_s=0)], True),
        # the forge redelivered the older merge late: merge time decides
        (_merge("1", merged_s=0, received_s=60), [_merge("2", merged_s=5, received_s=6)], False),
        # same second (forges give seconds): arrival decides
        (_merge("1", merged_s=0, received_s=1), [_merge("2", merged_s=0, received_s=2)], False),
        (_merge("2", merged_s=0, received_s=2), [_merge("1", merged_s=0, received_s=1)], True),
        # no merge time in the payload: arrival only
        (
            _merge("1", merged_s=None, received_s=1),
            [_merge("2", merged_s=None, received_s=3)],
            False,
        ),
        # the same merge for another spec of this Service does not supersede it
        (
            _merge("1", merged_s=0, received_s=0),
            [_merge("1", merged_s=0, received_s=1, spec="b")],
            True,
        ),
    ],
)
def test_newest_merge_decision(
    ours: ReceivedMerge, others: list[ReceivedMerge], newest: bool
) -> None:
    check = compute_newest(ours.id, sorted([ours, *others], key=ReceivedMerge.order))
    assert check.newest is newest, check.reason
    if not newest:
        assert check.reason.startswith("superseded") and "2222222222" in check.reason


def test_a_merge_whose_event_is_gone_is_not_handed_off() -> None:
    check = compute_newest(uuid.uuid4(), [_merge("1", merged_s=0, received_s=0)])
    assert not check.newest
    assert "handoff run" in check.reason


def test_a_run_started_by_hand_always_proceeds() -> None:
    assert ensure_newest("does-not-matter.yaml", None).newest
    assert ensure_newest("does-not-matter.yaml", Trigger(source="cli")).newest


def test_two_quick_merges_through_the_relay_supersede_the_first(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    one = pushed(spec_repo, {ALPHA_MANIFEST: "v: 1\n"})
    two = pushed(spec_repo, {"manifests/golden/alpha.json": '{"v": 2}\n'})
    first, second = deliver(relay, one, SECRET), deliver(relay, two, SECRET)
    # The relay answers 202 at once and emits from its inbox: both merges' events first.
    for accepted in (first, second):
        assert outcome_of(relay, accepted)["outcome"] == "emitted", accepted.text
    spec_file = str(spec_repo.specs_dir / "alpha.yaml")
    with temporary_settings({PREFECT_API_URL: prefect.api_url}):
        older = ensure_newest(spec_file, _trigger(first.json()["delivery"], one["after"]))
        newer = ensure_newest(spec_file, _trigger(second.json()["delivery"], two["after"]))
        other_service = ensure_newest(
            str(spec_repo.specs_dir / "beta.yaml"),
            _trigger(second.json()["delivery"], two["after"]),
        )
    assert not older.newest and "superseded" in older.reason
    assert older.newer == [newer.reason.split("merge ")[1].split(" is the newest")[0]]
    assert newer.newest, newer.reason
    # beta's Service got no merge event from delivery two: it cannot be proven newest
    assert not other_service.newest


def _trigger(delivery: str, commit: str) -> Trigger:
    return Trigger(source="forgejo", delivery_id=delivery, merge_commit=commit)
