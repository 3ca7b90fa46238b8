"""Model check of the handoff's decisions (issue 28, DESIGN.md I1-I5): a hypothesis state
machine interleaves the steps of handoff runs (tests/flows/cluster_model.py, each decided
by the project's own functions) with what the world does to them: the process dies at any
step, a run is started again (resuming, after done, after a rollback), the bake breaches
(where the machine was set up with one), a person edits the selector (also right after a
drift check), scales the candidate or changes its image, the apiserver fails a write, a
wait runs out, the candidate or the restored live workload never becomes Ready, a person
scales the candidate or the live workload (also right after a drift check, so that the
step's own write meets ReplicasEdited). After every rule:

- I1: while no person touched the objects since the handoff began, a Service that had ready
  endpoints then has some now; no write of the handoff ever takes the last one away. In
  place (a third of the machines) the declared outage is the exception: from its start on
  the ledger until the swap, and through a rollback that stops the candidate first.
- I2: endpoints never lead to two versions (no person-made selector does either); a twin's
  pods and the live Deployment's rewritten with the same revision are one.
- I3: a handoff that ends (done or rolled back) leaves the Service routing to ready pods.
- I4: a rerun of a done handoff changes nothing but its history entry.
- I5: the handoff never writes over a selector a person set, nor over a count a person set
  on a Deployment its rollback leaves as edited.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from flows.errors import HandoffError
from flows.ledger import TERMINAL, Phase
from flows.render import service_selector
from tests.flows.cluster_model import (
    CANARY,
    CANDIDATE,
    EDITED_IMAGE,
    LIVE,
    LIVE_REPLICASET,
    SERVICE,
    STABLE,
    TWIN,
    Cluster,
    Handoff,
    Steps,
    WaitTimedOut,
    candidate_in,
    make_manifest,
    make_spec,
)

RUN_TO_END = 400  # yields: far more than a whole handoff and its rollback take
RARE = st.integers(0, 3)  # a disruption happens when this draws 0


class HandoffMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = Cluster.before()
        self.manifest: dict[str, Any] = make_manifest(False)
        self.handoff: Handoff | None = None
        self.proc: Steps | None = None
        self.runs = 0
        self.handoff_id: str | None = None  # the handoff the ledger records
        self.since_done = False  # the world changed since the last handoff ended done
        self.trace: list[str] = []
        self.shared = False
        self.bake_looks = 0
        self.in_place = False
        self.spec = make_spec()

    @initialize(
        shared=st.booleans(),
        bake_looks=st.sampled_from([0, 0, 3]),
        layout=st.sampled_from(
            ["side by side", "side by side", "in place", "twin", "in place, replacing"]
        ),
    )
    def setup(self, shared: bool, bake_looks: int = 0, layout: str = "side by side") -> None:
        """Candidate pods that would match the live selector (the plan pins it) or not;
        a bake of so many looks before the retirement, or none; side by side, in place
        (the old pods stop at the apply, a declared outage until the swap), or a new spec
        of the live Deployment itself: gated in a twin beside it (its pods match the live
        selector), which then rewrites the live Deployment and is removed, or in place,
        in the live Deployment, its old pods stopped at the apply."""
        replaces = layout in ("twin", "in place, replacing")
        self.spec = make_spec(replaces_live=replaces)
        self.manifest = make_manifest(shared, replaces_live=replaces)
        self.shared = shared
        self.bake_looks = bake_looks
        self.in_place = layout.startswith("in place")

    @property
    def cand(self) -> str:
        """The Deployment the candidate is gated in."""
        return candidate_in(self.spec, in_place=self.in_place)

    # --- the handoff ---------------------------------------------------------
    def _next(self) -> None:
        assert self.proc is not None and self.handoff is not None
        try:
            self.trace.append(next(self.proc))
        except StopIteration:
            self.trace.append(f"ended: {self.handoff.outcome}")
            self.proc = None
        except HandoffError as exc:  # the flow fails with it (RestoreNotReady, a write)
            self.trace.append(f"ended raising {type(exc).__name__}")
            self.proc = None
        self._track()

    def _track(self) -> None:
        ledger = self.c.ledger()
        if ledger is not None and ledger.handoff_id != self.handoff_id:
            self.handoff_id = ledger.handoff_id
        if ledger is not None and ledger.phase in TERMINAL:
            self.since_done = self.since_done and ledger.phase is Phase.DONE

    @precondition(lambda self: self.proc is None)
    @rule()
    def start_a_run(self) -> None:
        """`handoff run SPEC`: a first run, a resume, or a rerun after done / rolled back."""
        self.runs += 1
        self.handoff = Handoff(self.c, self.spec, self.manifest, f"run-{self.runs}")
        self.handoff.bake_looks = self.bake_looks
        self.handoff.in_place = self.in_place
        self.proc = self.handoff.steps()
        self._next()

    @precondition(lambda self: self.proc is not None)
    @rule(steps=st.integers(1, 40), time_passes=st.booleans())
    def run_on(self, steps: int, time_passes: bool) -> None:
        """The run goes on for a while; with time_passes, pods become Ready as it waits."""
        for _ in range(steps):
            if self.proc is None:
                return
            if time_passes and self.handoff is not None and self.handoff.waiting:
                self.time_passes()
            self._next()

    @precondition(lambda self: self.proc is not None)
    @rule(rare=RARE)
    def crash(self, rare: int) -> None:
        """The process dies here; what it wrote stays."""
        assert self.proc is not None
        if rare:
            return
        self.proc.close()
        self.proc = None
        self.trace.append("crash")

    @precondition(lambda self: self.handoff is not None and self.handoff.waiting is not None)
    @rule()
    def wait_times_out(self) -> None:
        assert self.proc is not None and self.handoff is not None
        what = self.handoff.waiting
        self.trace.append(f"timeout: {what}")
        try:
            self.trace.append(self.proc.throw(WaitTimedOut(f"{what}: timed out")))
        except StopIteration:
            self.proc = None
        except HandoffError as exc:
            self.trace.append(f"ended raising {type(exc).__name__}")
            self.proc = None
        self._track()

    @precondition(lambda self: self.proc is not None)
    @rule(rare=RARE)
    def apiserver_fails_next_write(self, rare: int) -> None:
        self.c.fail_next_write = not rare

    @precondition(lambda self: self.proc is not None)
    @rule(rare=RARE)
    def image_source_unreachable(self, rare: int) -> None:
        assert self.handoff is not None
        self.handoff.image_unavailable = not rare

    @precondition(lambda self: self.proc is not None and self.bake_looks)
    @rule(rare=RARE)
    def bake_breaches(self, rare: int) -> None:
        assert self.handoff is not None
        self.handoff.bake_breach = not rare

    @precondition(lambda self: self.proc is not None)
    @rule(rare=RARE)
    def gates_fail(self, rare: int) -> None:
        assert self.handoff is not None
        self.handoff.gates_fail = not rare

    # --- the world ------------------------------------------------------------
    @rule()
    def time_passes(self) -> None:
        """A pod of each workload that can become Ready does."""
        for w in self.c.workloads.values():
            if w.can_ready and w.ready < w.replicas:
                w.ready += 1
        self.trace.append("tick")

    @precondition(lambda self: self.cand in self.c.workloads)
    @rule(rare=RARE)
    def candidate_never_ready(self, rare: int) -> None:
        if not rare:
            self.c.workloads[self.cand].can_ready = False

    @precondition(lambda self: self.c.ledger() is not None)
    @rule(rare=RARE)
    def live_never_ready(self, rare: int) -> None:
        """The restored live workload does not come back (during a rollback, say)."""
        if not rare:
            self.c.workloads[LIVE].can_ready = False
            self.trace.append("live cannot become ready")

    @rule(rare=RARE)
    def live_fixed(self, rare: int) -> None:
        if not rare:
            self.c.workloads[LIVE].can_ready = True

    def _person(self, what: str) -> None:
        self.c.person_touched, self.since_done = True, True
        self.trace.append(f"person: {what}")

    @rule(
        to=st.sampled_from([STABLE, CANARY, LIVE_REPLICASET]),
        right_after_check=st.booleans(),
        rare=RARE,
    )
    def person_edits_selector(self, to: dict[str, str], right_after_check: bool, rare: int) -> None:
        """A person points the Service at the live pods or the candidate's, while they
        serve, or narrows it to the live pods' ReplicaSet (the shape of a pin); with
        right_after_check, between a step's drift check and its write."""
        if rare:
            return
        if to is LIVE_REPLICASET:
            to = self.c.live_pin()
        serving = [
            w
            for w in self.c.workloads.values()
            if w.ready and all(w.pod_labels().get(k) == v for k, v in to.items())
        ]
        if not serving or self.c.selector == to:
            return
        self.c.selector = dict(to)
        ledger = self.c.ledger()
        if ledger is not None and ledger.phase not in TERMINAL:
            # An edit the handoff could tell from its own writes (I5 is about those).
            own = [ledger.snapshot.selector, ledger.pin, *ledger.rollback_pins]
            if ledger.revision is not None:
                own.append(service_selector(self.manifest, ledger.revision))
            self.c.selector_by_person = to not in own
        if right_after_check and self.handoff is not None:
            self.handoff.skip_next_check = True
        self._person(f"selector {to}")

    @precondition(lambda self: self.cand in self.c.workloads)
    @rule(
        which=st.sampled_from(["candidate", "live"]),
        replicas=st.integers(0, 3),
        right_after_check=st.booleans(),
        rare=RARE,
    )
    def person_scales(self, which: str, replicas: int, right_after_check: bool, rare: int) -> None:
        """`kubectl scale`; with right_after_check, between a step's drift check and its
        write, which then meets ReplicasEdited."""
        if rare:
            return
        name = self.cand if which == "candidate" else LIVE
        workload = self.c.workloads[name]
        if workload.replicas == replicas:
            return
        workload.scale(replicas)
        self.c.scaled_by_person.add(name)
        if right_after_check and self.handoff is not None:
            self.handoff.skip_next_check = True
        self._person(f"scale {name} to {replicas}")

    @precondition(lambda self: self.cand in self.c.workloads)
    @rule(rare=RARE)
    def person_sets_candidate_image(self, rare: int) -> None:
        """`kubectl set image`: the revision label stays; a rolling update keeps the
        ready count."""
        if rare:
            return
        candidate = self.c.workloads[self.cand]
        if candidate.image != EDITED_IMAGE:
            candidate.image = EDITED_IMAGE
            candidate.generation += 1
            candidate.template_hash = candidate.hash_of(candidate.generation)
            self._person(f"set image of {self.cand}")

    @rule(right_after_check=st.booleans(), rare=RARE)
    def person_restarts_live(self, right_after_check: bool, rare: int) -> None:
        """`kubectl rollout restart` of the live Deployment: its pods get a new
        pod-template-hash, so a pin of the old one selects none of them, and a rollback's
        pin is a new one (recorded before it is written)."""
        if rare:
            return
        self.c.workloads[LIVE].restart()
        if right_after_check and self.handoff is not None:
            self.handoff.skip_next_check = True
        self._person(f"restart {LIVE}")

    # --- I4 -------------------------------------------------------------------
    def _done_and_idle(self) -> bool:
        ledger = self.c.ledger()
        return (
            self.proc is None
            and not self.since_done
            and ledger is not None
            and ledger.phase is Phase.DONE
        )

    @precondition(lambda self: self._done_and_idle())
    @rule()
    def rerun_of_done_changes_nothing(self) -> None:
        # A clean rerun: an apiserver failure armed for a run that ended without
        # writing again is not this check's business (other rules inject those).
        self.c.fail_next_write = False
        before = self.c.state()
        entries = len(self.c.history())
        self.runs += 1
        handoff = Handoff(self.c, self.spec, self.manifest, f"run-{self.runs}")
        proc = handoff.steps()
        for _ in range(RUN_TO_END):
            try:
                next(proc)
            except StopIteration:
                break
            assert handoff.waiting is None, (
                f"I4: a rerun of a done handoff waits: {handoff.waiting}"
            )
        assert handoff.outcome == "nothing-to-do", f"I4: rerun of done: {handoff.outcome}"
        assert self.c.state() == before, "I4: a rerun of a done handoff changed the cluster"
        ledger = self.c.ledger()
        assert ledger is not None
        done_id = ledger.handoff_id
        added = {e["handoff_id"] for e in self.c.history()[entries:]}
        # Its own entry, and the done handoff's if its run died before writing it.
        assert added <= {handoff.run_id, done_id}, added

    # --- invariants -----------------------------------------------------------
    @invariant()
    def writes_kept_the_invariants(self) -> None:
        """I1, I2, I5 at each write; I3 at each terminal write (Cluster.write)."""
        assert not self.c.violations, (self.c.violations, self.trace[-40:])

    @invariant()
    def service_served_throughout(self) -> None:
        ledger = self.c.ledger()
        if ledger is None or self.c.person_touched:
            return
        endpoints = self.c.endpoints()
        if ledger.snapshot.serving and not self.c.declared_outage():
            assert endpoints, ("I1: no ready endpoint", ledger.phase, self.trace[-40:])
        versions = self.c.versions()
        assert len(versions) <= 1, ("I2: two versions", versions, self.trace[-40:])

    @invariant()
    def an_ended_handoff_routes_to_ready_pods(self) -> None:
        ledger = self.c.ledger()
        if ledger is None or ledger.phase not in TERMINAL or self.c.person_touched:
            return
        if ledger.snapshot.serving:
            assert self.c.endpoints(), ("I3", ledger.phase, self.c.selector, self.trace[-40:])


TestHandoffModel = HandoffMachine.TestCase
TestHandoffModel.settings = settings(
    max_examples=600,
    stateful_step_count=100,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_rollback_keeping_an_edited_candidate_never_serves_two_workloads() -> None:
    """Candidate pods match the live selector (the plan pinned it). The run is killed in
    the warm-up with one candidate pod Ready; a person scales the candidate; the rerun's
    drift check stops the handoff and the rollback leaves the edited candidate as it is.
    The Service stays pinned to the live pods (moving it back to {app: svc} would route
    to old and candidate pods together), and the cause says how to lift the pin."""
    m = HandoffMachine()
    m.setup(shared=True)
    m.start_a_run()
    # started, pinned, applied, APPLIED, the candidate to its preview size
    m.run_on(steps=6, time_passes=False)
    m.crash(rare=0)
    m.start_a_run()
    m.time_passes()  # the preview pod is Ready (not selected: the Service is pinned)
    candidate = m.c.workloads[CANDIDATE]
    candidate.scale(2)  # a person's `kubectl scale`, outside the machine's rules
    m.run_on(steps=40, time_passes=True)  # drift: PersonEdited(Deployment cand) -> rollback
    assert m.c.ledger() is not None
    assert not m.c.violations, m.c.violations
    assert len(m.c.endpoints()) <= 1, m.c.endpoints()
    ledger = m.c.ledger()
    assert ledger is not None and ledger.phase is Phase.ROLLED_BACK, m.trace
    assert "pod-template-hash" in m.c.selector, m.c.selector


def test_a_candidate_scaled_to_zero_during_the_retirement_is_not_called_done() -> None:
    """The old pods are retired; while the retirement waits for them to stop, a person
    scales the candidate to 0. The run looks once more before `done`: it does not end
    done with the Service routing to no ready pod."""
    m = HandoffMachine()
    m.setup(shared=False)
    m.start_a_run()
    for _ in range(100):
        if m.trace[-1] == "retired":
            break
        m.run_on(steps=1, time_passes=True)
    m.c.workloads[CANDIDATE].scale(0)  # a person's `kubectl scale --replicas=0`
    m.run_on(steps=10, time_passes=True)
    ledger = m.c.ledger()
    assert ledger is not None
    assert ledger.phase is not Phase.DONE or m.c.endpoints(), (
        "I3: the run ended done with the Service routing to no ready pod"
    )


def test_a_rollback_whose_live_workload_never_becomes_ready_keeps_the_service_serving() -> None:
    """Killed after the retirement, resumed, and that run's next write fails: the
    rollback scales the live workload back, but it never becomes Ready.
    The Service stays on the candidate, the ledger stays rolling-back, and once the live
    workload is fixed the next run finishes the rollback onto it."""
    m = HandoffMachine()
    m.setup(shared=True)
    m.start_a_run()
    for _ in range(100):
        if m.trace[-1] == "retired":
            break
        m.run_on(steps=1, time_passes=True)
    m.crash(rare=0)
    m.c.workloads[LIVE].can_ready = False
    m.start_a_run()
    m.run_on(steps=1, time_passes=False)
    m.c.fail_next_write = True  # the resumed retirement's write fails: rollback
    for wait in ("old rolled out", "a Ready pod to move back to"):
        for _ in range(50):
            if m.handoff is None or m.handoff.waiting == wait:
                break
            m.run_on(steps=1, time_passes=True)
        assert m.handoff is not None and m.handoff.waiting == wait, m.trace[-10:]
        m.wait_times_out()
    ledger = m.c.ledger()
    assert ledger is not None and ledger.phase is Phase.ROLLING_BACK
    assert m.c.endpoints() == {CANDIDATE: 1}, m.c.endpoints()
    m.live_fixed(rare=0)
    m.start_a_run()
    m.run_on(steps=40, time_passes=True)
    ledger = m.c.ledger()
    assert ledger is not None and ledger.phase is Phase.ROLLED_BACK, m.trace[-20:]
    assert set(m.c.endpoints()) == {LIVE}
    assert not m.c.violations, m.c.violations


def _until(m: HandoffMachine, mark: str, *, limit: int = 200) -> None:
    """Run on (pods becoming Ready as it waits) until the trace shows `mark`."""
    for _ in range(limit):
        if mark in m.trace:
            return
        m.run_on(steps=1, time_passes=True)
    raise AssertionError(f"never reached {mark!r}: {m.trace[-20:]}")


def test_a_count_a_person_sets_on_the_live_workload_during_the_rollback_is_left() -> None:
    """The warm-up times out and the rollback begins; before it restores the live
    Deployment, a person scales it to 3. The restore decides from the counts this handoff
    can have left it at (its recorded one, or 0): 3 is neither, so it is left as set."""
    m = HandoffMachine()
    m.setup(shared=False)
    m.start_a_run()
    _until(m, "wait the candidate's preview pods")
    m.candidate_never_ready(rare=0)
    m.wait_times_out()
    assert m.trace[-1] == "rolling back from applied", m.trace[-5:]
    m.person_scales(which="live", replicas=3, right_after_check=False, rare=0)
    _until(m, "rolled back")
    assert m.c.workloads[LIVE].replicas == 3, "the rollback overwrote the person's count"
    assert not m.c.violations, m.c.violations


def test_a_rollback_does_not_stop_a_candidate_a_person_points_the_service_back_at() -> None:
    """After the swap the scale-up never completes; the rollback moves the Service back
    to the live pods, and a person points it at the candidate's again before the
    candidate is stopped. Stopping it then would leave the Service with no endpoint: the
    candidate is left at its count."""
    m = HandoffMachine()
    m.setup(shared=False)
    m.start_a_run()
    _until(m, "ledger swapped")
    m.candidate_never_ready(rare=0)
    _until(m, "wait the candidate's pods")
    m.wait_times_out()
    _until(m, "selector moved back")
    m.person_edits_selector(to=CANARY, right_after_check=False, rare=0)
    assert m.c.selector == CANARY, "the person's edit did not land"
    m.run_on(steps=20, time_passes=True)
    assert not m.c.violations, m.c.violations
    assert m.c.endpoints() == {CANDIDATE: 1}, m.c.endpoints()


def test_a_selector_a_person_narrows_while_the_swap_waits_for_its_routes_is_left() -> None:
    """The swap has written the candidate's selector; before the routes follow it, a
    person narrows the Service to the live pods' ReplicaSet (the shape of the pin a
    rollback writes) and the wait times out. The failed step looks once more, finds the
    edit, and the rollback leaves the person's selector as it is."""
    m = HandoffMachine()
    m.setup(shared=False)
    m.start_a_run()
    _until(m, "selector written")
    m.person_edits_selector(to=LIVE_REPLICASET, right_after_check=False, rare=0)
    pinned = m.c.selector
    m.run_on(steps=1, time_passes=False)
    assert m.handoff is not None and m.handoff.waiting, m.trace[-5:]
    m.wait_times_out()
    _until(m, "ended: failed: PersonEdited")
    assert not m.c.violations, (m.c.violations, m.trace[-20:])
    assert m.c.selector == pinned, m.c.selector


def test_a_pin_a_person_sets_while_a_rollback_begins_is_not_taken_for_the_rollbacks() -> None:
    """A bake's breach has begun the rollback; before it moves the Service, a person
    narrows it to the live pods' ReplicaSet: the shape of a pin a rollback writes, but no
    pin this rollback recorded. The rollback leaves it, and ends rolled back."""
    m = HandoffMachine()
    m.setup(shared=False, bake_looks=3)
    m.start_a_run()
    _until(m, "baking")
    m.bake_breaches(rare=0)
    _until(m, "rolling back from the bake")
    m.person_edits_selector(to=LIVE_REPLICASET, right_after_check=False, rare=0)
    pinned = m.c.selector
    assert m.c.selector_by_person, m.trace[-5:]
    _until(m, "rolled back")
    assert not m.c.violations, (m.c.violations, m.trace[-20:])
    assert m.c.selector == pinned, m.c.selector
    ledger = m.c.ledger()
    assert ledger is not None and ledger.phase is Phase.ROLLED_BACK, m.trace[-10:]
    assert f"Service {SERVICE}" in ledger.edited, ledger.edited


def test_a_rollback_records_the_pin_to_a_live_deployment_a_person_restarted() -> None:
    """Shared labels: the candidate's preview pods match the live selector. A person
    restarts the live Deployment during the warm-up (a new pod-template-hash, so the
    plan's pin is stale); the run stops as PersonEdited and the rollback holds the
    Service on a pin of the new hash, recorded in the ledger before it is written, until
    the candidate's pods are gone; then the selector is the one before the handoff."""
    m = HandoffMachine()
    m.setup(shared=True)
    m.start_a_run()
    _until(m, "scaled to preview")
    m.person_restarts_live(right_after_check=False, rare=0)
    _until(m, "rolled back")
    m.run_on(steps=20, time_passes=True)
    assert not m.c.violations, (m.c.violations, m.trace[-20:])
    ledger = m.c.ledger()
    assert ledger is not None and ledger.phase is Phase.ROLLED_BACK, m.trace[-10:]
    restarted = m.c.workloads[LIVE].template_hash
    assert ledger.pin is not None and ledger.pin["pod-template-hash"] != restarted, ledger.pin
    assert m.c.live_pin() in ledger.rollback_pins, ledger.rollback_pins
    assert m.c.selector == ledger.snapshot.selector, m.c.selector


@pytest.mark.parametrize("shared", [False, True], ids=["own labels", "shared labels"])
def test_a_bake_breach_goes_back_to_the_warm_old_pods_and_rolls_back(shared: bool) -> None:
    """The candidate serves at its target while the old pods stay Ready for the bake; a
    breach moves the Service back to them (with shared labels, to the live pods' pin
    until the candidate's are gone) without an empty or mixed moment, the candidate stops,
    and the rollback ends rolled back with the old pods serving."""
    m = HandoffMachine()
    m.setup(shared=shared, bake_looks=3)
    m.start_a_run()
    _until(m, "baking")
    m.bake_breaches(rare=0)
    _until(m, "rolled back")
    m.run_on(steps=40, time_passes=True)
    assert not m.c.violations, (m.c.violations, m.trace[-30:])
    assert "rolling back from the bake" in m.trace
    assert m.c.endpoints() == {LIVE: m.c.workloads[LIVE].replicas}, m.c.endpoints()
    ledger = m.c.ledger()
    assert ledger is not None and ledger.phase is Phase.ROLLED_BACK, m.trace[-10:]
    assert ledger.cause == "bake breached", ledger.cause


def test_in_place_the_service_is_empty_only_inside_the_declared_outage() -> None:
    """In place the old pods stop at the apply, once the outage's start is on the
    ledger: the Service has no ready endpoint from then until the swap, and only then;
    the run ends done on the candidate, and a rerun changes nothing."""
    m = HandoffMachine()
    m.setup(shared=False, layout="in place")
    m.start_a_run()
    empty_phases: set[Phase] = set()
    for _ in range(200):
        if m.proc is None:
            break
        m.run_on(steps=1, time_passes=True)
        ledger = m.c.ledger()
        if ledger is not None and not m.c.endpoints():
            assert ledger.outage is not None, ("I1 outside the outage", m.trace[-5:])
            empty_phases.add(ledger.phase)
    assert not m.c.violations, m.c.violations
    assert empty_phases and Phase.SWAPPED not in empty_phases, empty_phases
    assert "old pods stopping" in m.trace and "ledger old-stopped" in m.trace, m.trace
    ledger = m.c.ledger()
    assert ledger is not None and ledger.phase is Phase.DONE, m.trace[-10:]
    assert set(m.c.endpoints()) == {CANDIDATE}
    m.rerun_of_done_changes_nothing()


def test_in_place_a_failed_gate_stops_the_candidate_before_the_old_pods_return() -> None:
    """The gates fail in place: the rollback stops the candidate first (it holds the
    GPUs), brings the old pods back and ends with them serving."""
    m = HandoffMachine()
    m.setup(shared=False, layout="in place")
    m.start_a_run()
    m.gates_fail(rare=0)
    _until(m, "rolled back")
    assert not m.c.violations, m.c.violations
    assert m.trace.index("candidate undone") < m.trace.index("restored old"), m.trace
    assert m.c.endpoints() == {LIVE: 2}, m.c.endpoints()


def test_in_place_a_live_workload_that_cannot_return_is_not_called_rolled_back() -> None:
    """In place the rollback's restored old pods never become Ready: nothing serves, so
    the handoff stays rolling-back (RestoreNotReady) rather than end `rolled-back` as if
    the Service were whole again; once the old pods can serve, the next run finishes."""
    m = HandoffMachine()
    m.setup(shared=False, layout="in place")
    m.start_a_run()
    m.gates_fail(rare=0)
    m.live_never_ready(rare=0)
    for wait in ("old rolled out", "a Ready pod to move back to"):
        for _ in range(50):
            if m.handoff is None or m.handoff.waiting == wait:
                break
            m.run_on(steps=1, time_passes=True)
        assert m.handoff is not None and m.handoff.waiting == wait, m.trace[-10:]
        m.wait_times_out()
    assert m.trace[-1] == "ended raising RestoreNotReady", m.trace[-5:]
    ledger = m.c.ledger()
    assert ledger is not None and ledger.phase is Phase.ROLLING_BACK, ledger
    assert not m.c.violations, (m.c.violations, m.trace[-15:])
    m.live_fixed(rare=0)
    m.start_a_run()
    m.run_on(steps=40, time_passes=True)
    ledger = m.c.ledger()
    assert ledger is not None and ledger.phase is Phase.ROLLED_BACK, m.trace[-20:]
    assert set(m.c.endpoints()) == {LIVE}, m.c.endpoints()
    assert not m.c.violations, m.c.violations


def test_in_place_a_bake_breach_is_reported_and_the_candidate_keeps_serving() -> None:
    """In place the old pods stopped before the candidate started: a breach of the bake
    has nothing warm to go back to, so it is reported only and the handoff ends done."""
    m = HandoffMachine()
    m.setup(shared=False, bake_looks=3, layout="in place")
    m.start_a_run()
    _until(m, "baking")
    m.bake_breaches(rare=0)
    _until(m, "ended: done")
    assert "bake breached: reported only" in m.trace, m.trace[-10:]
    assert not m.c.violations, m.c.violations
    assert set(m.c.endpoints()) == {CANDIDATE}, m.c.endpoints()


def test_a_twin_rollback_after_the_retirement_goes_back_through_a_twin() -> None:
    """Through a twin: the live Deployment has taken the candidate's spec, the Service
    selects its pods alone and the twin is gone; then the `done` write fails. Its
    recorded spec put back in place (Recreate) would stop the only pods that serve: the
    previous version runs as the twin first, the Service moves to it, the live Deployment
    is restored serving nothing, and the Service ends on its pods, never empty."""
    m = HandoffMachine()
    m.setup(shared=False, layout="twin")
    m.start_a_run()
    _until(m, "ledger retired")
    assert TWIN not in m.c.workloads, m.trace[-10:]
    m.c.fail_next_write = True  # `done` fails: the rollback begins
    _until(m, "rolled back")
    assert not m.c.violations, m.c.violations
    ledger = m.c.ledger()
    assert ledger is not None and ledger.phase is Phase.ROLLED_BACK, m.trace[-10:]
    live = m.c.workloads[LIVE]
    assert live.image == "r.invalid/old:v0" and m.c.endpoints() == {LIVE: 2}, m.c.endpoints()


def test_a_live_deployment_a_person_restarts_during_a_twin_rollback_is_left() -> None:
    """The twin's warm-up times out; during the rollback a person restarts the live
    Deployment (its spec now differs from the recorded one) and points the Service at
    its pods. The rollback puts back only a spec this handoff wrote: the restart stays,
    and so do the Service's endpoints."""
    m = HandoffMachine()
    m.setup(shared=False, layout="twin")
    m.start_a_run()
    _until(m, "wait the candidate's preview pods")
    m.candidate_never_ready(rare=0)
    m.wait_times_out()
    m.person_restarts_live(right_after_check=False, rare=0)
    m.person_edits_selector(to=STABLE, right_after_check=False, rare=0)
    _until(m, "rolled back")
    assert not m.c.violations, m.c.violations
    assert m.c.workloads[LIVE].restarts == 1, "the rollback undid the person's restart"


def test_a_rollback_keeps_a_twin_a_person_points_the_service_at() -> None:
    """The twin's gates fail; as the rollback begins, a person points the Service at the
    twin's pods. The rollback leaves that selector, and does not delete the twin it
    routes to (which would leave the Service with no endpoint)."""
    m = HandoffMachine()
    m.setup(shared=False, layout="twin")
    m.start_a_run()
    _until(m, "ledger warm")
    assert m.handoff is not None
    m.handoff.gates_fail = True
    _until(m, "rolling back from warm")
    m.person_edits_selector(to=CANARY, right_after_check=False, rare=0)
    assert m.c.selector == CANARY, "the person's edit did not land"
    _until(m, "rolled back")
    assert not m.c.violations, m.c.violations
    assert TWIN in m.c.workloads and m.c.endpoints() == {TWIN: 1}, m.c.endpoints()


def test_a_twin_rollback_begun_before_the_twins_removal_moves_to_the_twin() -> None:
    """Through a twin: the Service selects the rewritten live pods alone, and the twin's
    delete fails. The twin still runs the candidate's version: the Service moves to it
    (no other version in between, no second twin over the first) before the live
    Deployment's spec is put back, and ends on the restored live pods."""
    m = HandoffMachine()
    m.setup(shared=False, layout="twin")
    m.start_a_run()
    _until(m, "live rewritten")
    m.trace.clear()
    _until(m, "selector written")  # the Service on the live pods alone
    assert TWIN in m.c.workloads
    m.c.fail_next_write = True  # the twin's delete fails: the rollback begins
    _until(m, "rolled back")
    assert not m.c.violations, m.c.violations
    assert "previous version as twin" not in m.trace, m.trace
    assert m.c.endpoints() == {LIVE: 2}, m.c.endpoints()
    assert m.c.workloads[LIVE].image == "r.invalid/old:v0"


def test_a_selector_a_person_sets_while_the_rollback_readies_its_twin_keeps_the_live_pods() -> None:
    """The same rollback after the twin's removal; while the previous version's twin
    starts, a person points the Service at the rewritten live pods. The rollback leaves
    that selector, and leaves the live Deployment it routes to as it is (putting its
    spec back would stop the pods the person chose), noted as edited."""
    m = HandoffMachine()
    m.setup(shared=False, layout="twin")
    m.start_a_run()
    _until(m, "ledger retired")
    m.c.fail_next_write = True
    _until(m, "previous version as twin")
    m.person_edits_selector(to=CANARY, right_after_check=False, rare=0)
    assert m.c.selector == CANARY, "the person's edit did not land"
    _until(m, "rolled back")
    assert not m.c.violations, m.c.violations
    ledger = m.c.ledger()
    assert ledger is not None and f"Deployment {LIVE}" in ledger.edited, ledger
    assert m.c.endpoints() == {LIVE: 2}, m.c.endpoints()
