"""What a new handoff may do, decided from what the Service serves (flows.serving.route),
never from what the spec assumes: a table of the cases, and a property over any mix of
serving workloads."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows.ledger import ServingWorkload
from flows.serving import Route, Serving, route
from flows.spec import HandoffSpec
from tests.kube.test_spec_fuzz import valid_spec

REVISION = "abc123"


def _spec(*, current: str = "old", candidate: str = "cand") -> HandoffSpec:
    raw = valid_spec()
    raw["current"] = [current]
    raw["candidate"]["deployment"] = candidate
    return HandoffSpec.model_validate({**raw, "source_file": Path("/specs/fuzzed.yaml")})


def _serving(*workloads: tuple[str, str | None]) -> Serving:
    return Serving(
        workloads=[ServingWorkload(deployment=d, revision=r, ready=1) for d, r in workloads]
    )


@pytest.mark.parametrize(
    ("spec", "serving", "rendered", "want"),
    [
        # Routes to the spec's current workload: hand it off.
        (_spec(), _serving(("old", None)), None, Route.FORWARD),
        # No ready pod at all: nothing to keep serving, so it may go ahead.
        (_spec(), _serving(), REVISION, Route.FORWARD),
        # A finished handoff run again: the candidate serves the revision it renders.
        (_spec(), _serving(("cand", REVISION)), REVISION, Route.NOTHING_TO_DO),
        # The candidate serves another revision: re-applying it at 0 would empty it.
        (_spec(), _serving(("cand", "older")), REVISION, Route.REFUSED),
        # Some other workload serves: the spec's picture is wrong.
        (_spec(), _serving(("someone-else", None)), None, Route.REFUSED),
        # Two workloads at once, one of them the candidate: not a state to plan from.
        (_spec(), _serving(("old", None), ("cand", REVISION)), REVISION, Route.REFUSED),
        # Replacing the live Deployment: once done, it serves the candidate's revision.
        (_spec(candidate="old"), _serving(("old", REVISION)), REVISION, Route.NOTHING_TO_DO),
        # ... and before, another revision of it: a handoff (through a twin) goes ahead.
        (_spec(candidate="old"), _serving(("old", None)), REVISION, Route.FORWARD),
    ],
)
def test_route(spec: HandoffSpec, serving: Serving, rendered: str | None, want: Route) -> None:
    decided = route(spec, serving, candidate_revision=rendered)
    assert decided.route is want, decided.reason
    if want is Route.REFUSED:
        assert "Nothing was written" in decided.reason and serving.line() in decided.reason


NAMES = st.sampled_from(["old", "cand", "other", "(no Deployment)"])
REVISIONS = st.sampled_from([None, REVISION, "older"])


@given(
    workloads=st.lists(st.tuples(NAMES, REVISIONS), max_size=4),
    rendered=st.one_of(st.none(), REVISIONS),
)
def test_a_handoff_only_goes_ahead_from_what_the_spec_calls_current(
    workloads: list[tuple[str, str | None]], rendered: str | None
) -> None:
    serving = _serving(*workloads)
    decided = route(_spec(), serving, candidate_revision=rendered)
    names = serving.deployments
    if decided.route is Route.FORWARD:
        assert names <= {"old"}, decided.reason
    elif decided.route is Route.NOTHING_TO_DO:
        assert names == {"cand"} and rendered is not None
        assert {w.revision for w in serving.workloads} == {rendered}
    else:
        assert names and not names <= {"old"}, decided.reason
