"""An in-memory model of what one handoff works on, for the model check
(tests/flows/test_model_check.py): the Service (selector and annotations), the live and
the candidate Deployments (replicas, pod template, Ready pods) and the endpoints that
follow from them; and one handoff run written as a generator that yields between its
writes, so a test can crash it, time out its waits or fail its next write anywhere.

Side by side with a separate candidate Deployment (`current: [old]`, `candidate: cand`),
the path the seeds take, with or without a bake before the retirement; in place with
the same two Deployments (the old pods stop at the apply, once the outage's start is on
the ledger; a rollback stops the candidate before it restores them); or a new spec of the
live Deployment itself (`candidate: old`) side by side, gated in a twin Deployment
(`old-handoff`) whose retirement rewrites the live Deployment with the candidate's spec,
narrows the Service to its pods and deletes the twin (a rollback puts the recorded spec
back); or that new spec in place, in the live Deployment itself (its pods stop at the
apply; a rollback puts its recorded spec back). The run makes the
writes the real steps make, in their order (flows/handoff.py, start.py, apply.py, warm.py,
gating.py, approve.py, swap.py, scale.py, rollback.py, session.py), and every decision it
takes is the project's own function, called on snapshots built from the model:
flows.serving.route, the plan's selector pin, flows.start's checks, flows.ledger's
transition table, flows.drift's allowed selectors and replica counts,
flows.rollback._written_by and restorable_from. Only the plumbing between them (reads, the
read-modify-write of a selector, the waits) is transcribed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

from flows import drift
from flows.bake import BakeBreached, way_back
from flows.capacity import Decision, Strategy
from flows.errors import HandoffError, PermanentError
from flows.kube.client import Kube
from flows.kube.objects import (
    REVISION_ANNOTATION,
    DeploymentSnapshot,
    PodSnapshot,
    ReplicaSetSnapshot,
    ServiceSnapshot,
    matches,
    owned_by_deployment,
)
from flows.kube.write import ReplicasEdited, SelectorEdited, WorkloadReplaced
from flows.ledger import (
    REVISION_LABEL,
    TERMINAL,
    Ledger,
    OutageRecord,
    Phase,
    ServingWorkload,
    Snapshot,
    WorkloadSnapshot,
    appended_history,
    history_entries,
    parse_ledger,
    reached,
    unfinished_in,
)
from flows.plan import Plan, PlanRefused, _live_selector_pin
from flows.render import (
    HANDOFF_ID_ANNOTATION,
    TWIN_SUFFIX,
    WORKLOAD_LABEL,
    compute_revision,
    render_candidate,
    template_sha256,
)
from flows.rollback import RestoreNotReady, _written_by, restorable_from
from flows.run import HandoffRun
from flows.serving import Route, Routing, Serving, route
from flows.spec import HandoffSpec
from flows.start import ensure_not_rolling_back, ensure_same_candidate
from flows.swap import live_only_selector, target_selector
from flows.tasks import EXPLAINED
from tests.kube.test_spec_fuzz import valid_spec

NS = "ns"
SERVICE = "svc"
LIVE = "old"
CANDIDATE = "cand"
TWIN = LIVE + TWIN_SUFFIX  # the candidate gated beside the live Deployment it replaces
CONTAINER = "server"
PINNED = "r.invalid/s@sha256:" + "a" * 64
EDITED_IMAGE = "r.invalid/s@sha256:" + "e" * 64
LIVE_SELECTOR = {"app": "svc"}
# What a person may point the Service at by hand: the live pods, or the candidate's.
STABLE = {"track": "stable"}
# Resolved when a person picks it: the live selector narrowed to the live pods' hash.
LIVE_REPLICASET = {"pod-template-hash": "(the live pods')"}
CANARY = {"track": "canary"}

Steps = Generator[str, None, None]


def make_spec(*, replaces_live: bool = False) -> HandoffSpec:
    """A separate candidate Deployment, or the live Deployment's new spec (side by side
    gated in a twin Deployment first, in place in the live Deployment itself)."""
    raw = valid_spec(NS, SERVICE)
    raw["current"] = [LIVE]
    deployment = LIVE if replaces_live else CANDIDATE
    raw["candidate"].update(deployment=deployment, container=CONTAINER, replicas=2)
    raw["candidate"]["preview_replicas"] = 1
    raw["approval"] = {"required": False}
    return HandoffSpec.model_validate({**raw, "source_file": Path("/specs/fuzzed.yaml")})


def candidate_in(spec: HandoffSpec, *, in_place: bool) -> str:
    """The Deployment the candidate runs in: its own, a twin of the live one it replaces
    side by side, or the live one itself replaced in place."""
    if not spec.replaces_live:
        return CANDIDATE
    return LIVE if in_place else TWIN


def make_manifest(shared_labels: bool, *, replaces_live: bool = False) -> dict[str, Any]:
    """The candidate Deployment's file. With shared labels its pods match the live
    selector, so the plan narrows the Service to the live pods before the apply. Replacing
    the live Deployment, its own file (its selector, so its pods match the Service's)."""
    app = "svc" if shared_labels or replaces_live else "cand"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": LIVE if replaces_live else CANDIDATE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app, **CANARY}},
                "spec": {"containers": [{"name": CONTAINER, "image": "r.invalid/s:v1"}]},
            },
        },
    }


class ApiError(PermanentError):
    """The apiserver refused a write (a 500, a webhook, a 403)."""


class WaitTimedOut(PermanentError):
    """A wait of the run ran past its deadline (thrown into the run by the test)."""


class ImageUnavailable(PermanentError):
    """The image wait gave up: the source cannot be reached."""


class GateFailed(PermanentError):
    """A gate did not pass."""


@dataclass
class Workload:
    name: str
    uid: str
    replicas: int
    match: dict[str, str]
    labels: dict[str, str]
    image: str
    template_hash: str
    ready: int = 0
    can_ready: bool = True
    generation: int = 1
    handoff_id: str | None = None
    restarts: int = 0  # `kubectl rollout restart`: an annotation of the pod template

    def hash_of(self, generation: int) -> str:
        """A pod-template-hash for a generation (never with a '-', as the real ones)."""
        return f"{self.name.replace('-', '')}h{generation}"

    def pod_labels(self) -> dict[str, str]:
        return {**self.labels, "pod-template-hash": self.template_hash}

    def template(self) -> dict[str, Any]:
        restarted = {"kubectl.kubernetes.io/restartedAt": str(self.restarts)}
        return {
            "metadata": {
                "labels": dict(self.labels),
                **({"annotations": restarted} if self.restarts else {}),
            },
            "spec": {"containers": [{"name": CONTAINER, "image": self.image}]},
        }

    def scale(self, replicas: int) -> None:
        """Pods beyond the count stop at once; new ones are Ready after a tick."""
        self.replicas = replicas
        self.ready = min(self.ready, replicas)

    def put_spec(self, spec: dict[str, Any]) -> None:
        """flows.kube.write.replace_deployment_spec: the recorded template and count."""
        template = spec["template"]
        annotations = template["metadata"].get("annotations") or {}
        restarts = int(annotations.get("kubectl.kubernetes.io/restartedAt", 0))
        if template != self.template():
            # Recreate, as the seeds' GPU Deployments: the old pods stop first.
            self.ready = 0
            self.restarts = restarts
            self.labels = dict(template["metadata"]["labels"])
            self.image = template["spec"]["containers"][0]["image"]
            self.generation += 1
            self.template_hash = self.hash_of(self.generation)
        self.scale(spec["replicas"])

    def restart(self) -> None:
        """A new pod-template-hash; the rolling update keeps the ready count."""
        self.restarts += 1
        self.generation += 1
        self.template_hash = self.hash_of(self.generation)

    def set_template(self, labels: dict[str, str], image: str) -> None:
        if labels == self.labels and image == self.image:
            return
        self.labels, self.image = dict(labels), image
        self.generation += 1
        self.template_hash = self.hash_of(self.generation)
        self.ready = 0  # the pods of the new template start afresh

    def snapshot(self) -> DeploymentSnapshot:
        annotations = {REVISION_ANNOTATION: str(self.generation)}
        if self.handoff_id is not None:
            annotations[HANDOFF_ID_ANNOTATION] = self.handoff_id
        return DeploymentSnapshot(
            name=self.name,
            namespace=NS,
            uid=self.uid,
            resource_version=f"{self.name}-{self.generation}-{self.replicas}",
            generation=self.generation,
            observed_generation=self.generation,
            replicas=self.replicas,
            ready_replicas=self.ready,
            updated_replicas=self.replicas,
            total_replicas=self.replicas,
            selector=dict(self.match),
            template_labels=dict(self.labels),
            gpus_per_pod=1,
            images={CONTAINER: self.image},
            annotations=annotations,
            spec={"replicas": self.replicas, "template": self.template()},
        )

    def replica_set(self) -> ReplicaSetSnapshot:
        return ReplicaSetSnapshot(
            name=f"{self.name}-{self.template_hash}",
            uid=f"rs-{self.name}-{self.template_hash}",
            owner_uid=self.uid,
            owner=self.name,
            revision=str(self.generation),
            template_hash=self.template_hash,
            replicas=self.replicas,
            created=self.replicas,
        )

    def pods(self) -> list[PodSnapshot]:
        owner = f"{self.name}-{self.template_hash}"
        return [
            PodSnapshot(
                name=f"{owner}-{i}",
                namespace=NS,
                uid=f"{owner}-{i}",
                labels=self.pod_labels(),
                node="n1",
                phase="Running",
                ready=i < self.ready,
                terminating=False,
                gpus=1,
                restart_count=0,
                owner=owner,
            )
            for i in range(self.replicas)
        ]


@dataclass
class Cluster:
    """The objects, and what the handoff's writes did to the invariants."""

    selector: dict[str, str]
    workloads: dict[str, Workload]
    annotations: dict[str, str] = field(default_factory=dict)
    selector_by_person: bool = False  # the selector is the last one a person wrote
    person_touched: bool = False  # a person changed an object since the handoff began
    scaled_by_person: set[str] = field(default_factory=set)  # counts a person set last
    fail_next_write: bool = False
    violations: list[str] = field(default_factory=list)
    writes: int = 0
    _parsed: tuple[str | None, Ledger | None] = (None, None)

    @classmethod
    def before(cls) -> Cluster:
        live = Workload(
            name=LIVE,
            uid="uid-old",
            replicas=2,
            match=dict(LIVE_SELECTOR),
            labels={**LIVE_SELECTOR, **STABLE},
            image="r.invalid/old:v0",
            template_hash="live0",
            ready=2,
        )
        return cls(selector=dict(LIVE_SELECTOR), workloads={LIVE: live})

    # --- reads ---------------------------------------------------------------
    def declared_outage(self) -> bool:
        """In place, from the outage's start on the ledger until the swap, and through a
        rollback (its candidate stops before the old pods come back): a window in which
        the Service may have no ready endpoint (I1 does not hold there)."""
        ledger = self.ledger()
        if ledger is None or ledger.outage is None:
            return False
        return ledger.phase is Phase.ROLLING_BACK or not reached(ledger.phase, Phase.SWAPPED)

    def live_pin(self) -> dict[str, str]:
        """The live selector narrowed to the live pods' current ReplicaSet."""
        return {**LIVE_SELECTOR, "pod-template-hash": self.workloads[LIVE].template_hash}

    def endpoints(self) -> dict[str, int]:
        """Ready pods the selector matches, per Deployment."""
        return {
            w.name: w.ready
            for w in self.workloads.values()
            if w.ready and matches(self.selector, w.pod_labels())
        }

    def versions(self) -> set[tuple[str, str]]:
        """What the endpoints lead to, as clients tell versions apart: by revision label
        and image (a twin's pods and the live Deployment's with the same spec are one;
        `kubectl set image` keeps the labels)."""
        return {
            (w.labels.get(REVISION_LABEL, ""), w.image)
            for w in self.workloads.values()
            if w.name in self.endpoints()
        }

    def serving(self) -> Serving:
        return Serving(
            workloads=[
                ServingWorkload(
                    deployment=name,
                    revision=self.workloads[name].labels.get(REVISION_LABEL),
                    ready=n,
                )
                for name, n in sorted(self.endpoints().items())
            ]
        )

    def ledger(self) -> Ledger | None:
        raw = self.annotations.get("handoff.dev/ledger")
        if raw != self._parsed[0]:
            self._parsed = (raw, parse_ledger(self.annotations))
        return self._parsed[1]

    def service_snapshot(self) -> ServiceSnapshot:
        return ServiceSnapshot(
            name=SERVICE,
            namespace=NS,
            uid="uid-svc",
            resource_version=str(self.writes),
            cluster_ip="10.0.0.1",
            selector=dict(self.selector),
            annotations=dict(self.annotations),
        )

    def pods(self) -> list[PodSnapshot]:
        return [p for w in self.workloads.values() for p in w.pods()]

    def state(self) -> tuple[Any, ...]:
        """Everything a handoff could change, for comparing before and after a rerun."""
        return (
            dict(self.selector),
            self.annotations.get("handoff.dev/ledger"),
            sorted(
                (w.name, w.replicas, w.image, sorted(w.labels.items()), w.generation, w.handoff_id)
                for w in self.workloads.values()
            ),
        )

    # --- the handoff's writes ----------------------------------------------
    def write(self, what: str, change: Callable[[], None]) -> None:
        """One write of the handoff; an apiserver error makes it fail, unwritten. Checks
        that the write itself neither empties the Service (I1) nor makes it route to two
        Deployments (I2): the swap is one write, its instant."""
        if self.fail_next_write:
            self.fail_next_write = False
            raise ApiError(f"{what}: the apiserver answered 500")
        before, versions_before = self.endpoints(), self.versions()
        change()
        self.writes += 1
        after = self.endpoints()
        if before and not after and not self.declared_outage():
            self.violations.append(f"I1: {what} left the Service with no ready endpoint")
        if len(self.versions()) > 1 and len(versions_before) <= 1:
            self.violations.append(f"I2: {what} made the Service route to {sorted(after)}")

    def update_selector(
        self, target: dict[str, str], expected: Callable[[dict[str, str]], bool]
    ) -> None:
        """flows.kube.write.update_service_selector's decision, on a fresh read."""
        if self.selector == target:
            return
        if not expected(self.selector):
            raise SelectorEdited(f"selector {self.selector} is not one this handoff knows")
        if self.selector_by_person:
            self.violations.append(
                f"I5: the person's selector {self.selector} was overwritten with {target}"
            )

        def change() -> None:
            self.selector = dict(target)
            self.selector_by_person = False

        self.write(f"selector {target}", change)

    def save_ledger(self, ledger: Ledger) -> Ledger:
        """flows.ledger_store.save_ledger: refuses to write over another live handoff."""
        on_cluster = self.ledger()
        if (
            on_cluster is not None
            and on_cluster.handoff_id != ledger.handoff_id
            and on_cluster.phase not in TERMINAL
        ):
            raise PermanentError(f"held by handoff {on_cluster.handoff_id}")

        def change() -> None:
            self.annotations["handoff.dev/ledger"] = ledger.dump()
            if on_cluster is None or on_cluster.handoff_id != ledger.handoff_id:
                self.selector_by_person = False  # a new handoff read it before deciding
                self.person_touched = False
                self.scaled_by_person.clear()

        self.write(f"ledger {ledger.phase}", change)
        ended = ledger.phase in TERMINAL and ledger.snapshot.serving
        if ended and not self.person_touched and not self.endpoints():
            self.violations.append(
                f"I3: the handoff ended {ledger.phase} with the Service on {self.selector}, "
                "which leads to no ready pod"
            )
        return ledger

    def record(self, handoff_id: str, outcome: str) -> None:
        """flows.report.record.record: the history entry, once."""
        entries = history_entries(self.annotations)
        if any(e.get("handoff_id") == handoff_id and e.get("outcome") == outcome for e in entries):
            return
        entry = {"handoff_id": handoff_id, "outcome": outcome}

        def change() -> None:
            self.annotations["handoff.dev/history"] = appended_history(self.annotations, entry)

        self.write(f"history {outcome}", change)

    def scale(self, name: str, replicas: int, expected: set[int] | None = None) -> None:
        """flows.kube.write.scale_deployment on a fresh read: a count already there is
        left; with `expected` (the counts the step decided from), any other count is a
        person's, ReplicasEdited, never overwritten. A count a person set on a Deployment
        the ledger leaves as edited is never written at all (I5)."""
        workload = self.workloads[name]
        if workload.replicas == replicas:
            return
        if expected is not None and workload.replicas not in expected:
            raise ReplicasEdited(
                f"Deployment {name}: expected {sorted(expected)}, found {workload.replicas}",
                name=name,
            )
        ledger = self.ledger()
        if name in self.scaled_by_person and ledger and f"Deployment {name}" in ledger.edited:
            self.violations.append(
                f"I5: the count {workload.replicas} a person set on {name} was overwritten "
                f"with {replicas}"
            )
        self.write(f"scale {name} to {replicas}", lambda: workload.scale(replicas))

    def delete(self, name: str) -> None:
        """A Deployment deleted (its pods stop with it)."""

        def change() -> None:
            del self.workloads[name]

        self.write(f"delete Deployment {name}", change)

    def history(self) -> list[dict[str, Any]]:
        return history_entries(self.annotations)


@dataclass
class PlanStub:
    """What the steps read of flows.plan.Plan here: the manifest and the pin."""

    manifest: dict[str, Any]
    pin_live_selector: dict[str, str] | None
    strategy: Strategy = Strategy.SIDE_BY_SIDE
    decision: Decision = field(
        default_factory=lambda: Decision(strategy=Strategy.SIDE_BY_SIDE, reasons=[])
    )


class Handoff:
    """One run of the handoff flow on the model: `steps()` is the process."""

    def __init__(
        self, cluster: Cluster, spec: HandoffSpec, manifest: dict[str, Any], run_id: str
    ) -> None:
        self.c, self.spec, self.manifest, self.run_id = cluster, spec, manifest, run_id
        self.waiting: str | None = None  # what the process waits for, if it does
        self.skip_next_check = False  # a person's edit landed right after a drift check
        self.image_unavailable = False
        self.gates_fail = False
        self.bake_looks = 0  # the bake's length in yields; 0: no bake
        self.bake_breach = False
        self.in_place = False  # the old pods stop at the apply (a declared outage)
        self.outcome: str | None = None  # how the process ended
        self.run: HandoffRun | None = None
        self.started_new = False

    @property
    def cand(self) -> str:
        """flows.render.candidate_name: the Deployment the candidate is gated in."""
        return candidate_in(self.spec, in_place=self.in_place)

    # --- plumbing ----------------------------------------------------------
    def _run(self, ledger: Ledger, pin: dict[str, str] | None) -> HandoffRun:
        strategy = Strategy(ledger.strategy)
        stub = PlanStub(
            manifest=self.manifest,
            pin_live_selector=pin,
            strategy=strategy,
            decision=Decision(strategy=strategy, reasons=[]),
        )
        plan = cast(Plan, stub)
        return HandoffRun(kube=cast(Kube, None), spec=self.spec, plan=plan, ledger=ledger)

    @property
    def r(self) -> HandoffRun:
        assert self.run is not None
        return self.run

    def advance(self, phase: Phase, **changes: Any) -> Steps:
        """HandoffRun.advance: the ledger's next phase, through Ledger.to."""
        if self.r.reached(phase) and not changes:
            return
        self.r.ledger = self.c.save_ledger(self.r.ledger.to(phase, **changes))
        yield f"ledger {phase}"

    def wait(self, what: str, ready: Callable[[], bool]) -> Steps:
        """Read until `ready`; the test may throw WaitTimedOut in at any yield."""
        while not ready():
            self.waiting = what
            try:
                yield f"wait {what}"
            finally:
                self.waiting = None

    def check(self) -> None:
        """drift.check: the cluster against what this handoff recorded and wrote."""
        if self.skip_next_check:
            self.skip_next_check = False
            return
        changes = self.changes()
        if changes:
            raise drift.PersonEdited(self.r, changes)

    def changes(self) -> list[drift.Change]:
        """flows.drift.observe, with its own helpers deciding what is allowed."""
        run = self.r
        if run.ledger.phase in (Phase.ROLLING_BACK, Phase.ROLLED_BACK, Phase.DONE):
            return []
        found: list[drift.Change] = []
        allowed = drift.written_selectors(run)
        if self.c.selector not in allowed:
            found.append(
                drift.Change(
                    kind="Service",
                    name=SERVICE,
                    field="spec.selector",
                    expected=str(allowed),
                    observed=str(self.c.selector),
                )
            )
        if drift.live_untouched(run):
            for recorded in run.ledger.snapshot.workloads:
                live = self.c.workloads[recorded.name].snapshot()
                if drift._retired_by_this_handoff(run, recorded, live):
                    continue
                if live.replicas != recorded.replicas:
                    found.append(
                        drift._deployment(
                            recorded.name, "spec.replicas", recorded.replicas, live.replicas
                        )
                    )
                elif recorded.generation and live.generation != recorded.generation:
                    edited = f"{live.generation} (its spec was edited or rolled)"
                    found.append(
                        drift._deployment(
                            recorded.name, "metadata.generation", recorded.generation, edited
                        )
                    )
        if run.reached(Phase.APPLIED) and not run.reached(Phase.RETIRED):
            candidate = self.c.workloads.get(self.cand)
            if candidate is None:
                if drift._twin_removed_by_this_handoff(run, self.c.selector):
                    return found
                found.append(drift._deployment(self.cand, "(the object)", "applied", "deleted"))
                return found
            ledger = run.ledger
            gated = ledger.candidate_template_sha256
            if gated and template_sha256(candidate.template()) != gated:
                found.append(drift._deployment(self.cand, "spec.template", "applied", "edited"))
            elif candidate.replicas not in drift.candidate_replicas(run):
                found.append(
                    drift._deployment(
                        self.cand,
                        "spec.replicas",
                        sorted(drift.candidate_replicas(run)),
                        candidate.replicas,
                    )
                )
        return found

    # --- begin: plan, recover, start or resume (flows/session.py) ----------
    def plan(self) -> tuple[Routing, dict[str, str] | None, Ledger | None]:
        """flows.plan.make_plan's decisions: the route and the pin."""
        c = self.c
        resumed = unfinished_in(c.annotations)
        if resumed is not None and resumed.spec == self.spec.name:
            routing = Routing(route=Route.FORWARD, reason=f"resuming {resumed.handoff_id}")
            return routing, resumed.pin, resumed
        # Replacing the live Deployment, its own image is what a finished handoff left.
        final = c.workloads[LIVE] if self.spec.replaces_live else c.workloads.get(CANDIDATE)
        rendered = (
            compute_revision(self.spec, self.manifest, final.image) if final is not None else None
        )
        routing = route(self.spec, c.serving(), candidate_revision=rendered)
        pin = None
        if routing.route is Route.FORWARD:
            live = c.workloads[LIVE]
            pin = _live_selector_pin(
                self.spec,
                c.service_snapshot(),
                [live.snapshot()],
                self.manifest,
                c.pods(),
                [w.replica_set() for w in c.workloads.values()],
            )
        return routing, pin, resumed

    def snapshot(self) -> Snapshot:
        c = self.c
        replaces = self.spec.replaces_live
        candidate = None if replaces else c.workloads.get(CANDIDATE)
        live = c.workloads[LIVE].snapshot()
        return Snapshot(
            selector=dict(c.selector),
            cluster_ip="10.0.0.1",
            workloads=[
                WorkloadSnapshot(
                    name=live.name,
                    replicas=live.replicas,
                    resource_version=live.resource_version,
                    uid=live.uid,
                    generation=live.generation,
                    spec=live.spec if replaces else None,
                )
            ],
            candidate_existed=candidate is not None,
            candidate_replicas=candidate.replicas if candidate is not None else 0,
            serving=c.serving().workloads,
        )

    def steps(self) -> Steps:
        """flows/handoff.py: begin, the steps, a rollback on any failure, finish."""
        yield "plan"
        try:
            routing, pin, resumed = self.plan()
        except PlanRefused:
            self.outcome = "refused"
            return
        snapshot = self.snapshot()  # flows.plan.Plan.snapshot: the plan's own read
        yield from self._recover()
        if resumed is not None:
            if resumed.phase is not Phase.ROLLING_BACK:
                ensure_same_candidate(self.spec, cast(Plan, PlanStub(self.manifest, pin)), resumed)
            self.run = self._run(resumed, pin)
        elif routing.route is Route.REFUSED:
            self.outcome = "refused"
            return
        else:
            now = "2026-01-01T00:00:00Z"
            done = routing.reason if routing.route is Route.NOTHING_TO_DO else None
            ledger = Ledger(
                handoff_id=self.run_id,
                spec=self.spec.name,
                phase=Phase.DONE if done else Phase.STARTED,
                cause=done,
                strategy=str(Strategy.IN_PLACE if self.in_place else Strategy.SIDE_BY_SIDE),
                snapshot=snapshot,
                pin=pin,
                started_at=now,
                updated_at=now,
            )
            if done:
                self.run = self._run(ledger, pin)
                self.c.record(self.run_id, "done")  # finish(): the history entry only
                self.outcome = "nothing-to-do"
                return
            self.run = self._run(self.c.save_ledger(ledger), pin)
            self.started_new = True
            yield "started"
        try:
            yield from self.forward()
        except HandoffError as exc:
            yield from self.roll_back(exc)
            yield from self.finish()
            self.outcome = f"failed: {type(exc).__name__}"
            return
        yield from self.finish()
        self.outcome = "done"

    def _recover(self) -> Steps:
        """flows.report.record.recover: a terminal ledger without its history entry."""
        ledger = self.c.ledger()
        if ledger is None or ledger.phase not in TERMINAL:
            return
        if any(e.get("handoff_id") == ledger.handoff_id for e in self.c.history()):
            return
        self.c.record(ledger.handoff_id, str(ledger.phase))
        yield "recovered"

    def finish(self) -> Steps:
        self.c.record(self.r.ledger.handoff_id, str(self.r.ledger.phase))
        yield "finished"

    def step(self, body: Callable[[], Steps]) -> Steps:
        """flows.tasks.step: a drift check before and after each forward step, and one
        more after a failure that does not already name an edit (_blame_edit)."""
        self.check()
        try:
            yield from body()
        except HandoffError as failure:
            if not isinstance(failure, EXPLAINED) and (changes := self.changes()):
                raise drift.PersonEdited(self.r, changes, failure=failure) from failure
            raise
        self.check()

    # --- the forward steps -------------------------------------------------
    def forward(self) -> Steps:
        pinned: list[str | None] = [None]

        def image() -> Steps:
            ensure_not_rolling_back(self.r.ledger)
            if self.r.ledger.image and self.r.reached(Phase.APPLIED):
                return
            yield from self.wait("the image", lambda: True)
            if self.image_unavailable:
                raise ImageUnavailable("the image source cannot be reached")
            pinned[0] = PINNED

        yield from self.step(image)
        yield from self.step(lambda: self.apply(pinned[0]))
        yield from self.step(self.warm)
        yield from self.step(self.gates)
        yield from self.step(self.approve)
        yield from self.step(self.swap)
        yield from self.step(self.scale_up_and_retire)

    def apply(self, pinned: str | None) -> Steps:
        """flows/apply.py: in place, the outage's start on the cluster, then the old pods
        stop (their count from the ledger's record), and the step waits for them."""
        run = self.r
        image = pinned or PINNED
        revision = compute_revision(self.spec, self.manifest, image)
        if run.reached(Phase.APPLIED):
            return
        if not run.ledger.wrote:
            yield from self.advance(run.ledger.phase, wrote=True)
        pin = cast(PlanStub, run.plan).pin_live_selector
        if pin:
            snapshot = run.ledger.snapshot.selector
            self.c.update_selector(pin, lambda found: found == snapshot)
            yield "pinned"
        body = render_candidate(
            self.spec,
            self.manifest,
            pinned=image,
            revision=revision,
            replicas=0,
            handoff_id=run.ledger.handoff_id,
            twin=run.twin,
        )
        name = body["metadata"]["name"]
        template = body["spec"]["template"]
        labels = dict(template["metadata"]["labels"])
        image_now = template["spec"]["containers"][0]["image"]
        in_place = run.ledger.strategy == Strategy.IN_PLACE
        if in_place:
            if run.ledger.outage is None:
                outage = OutageRecord(started=0.0, estimate_s=60.0, bound_s=120.0)
                yield from self.advance(run.ledger.phase, outage=outage)
            self.c.scale(LIVE, 0, expected=run.recorded_replicas(LIVE))
            yield "old pods stopping"

        def change() -> None:
            existing = self.c.workloads.get(name)
            if existing is None:
                self.c.workloads[name] = Workload(
                    name=name,
                    uid=f"uid-{name}",
                    replicas=0,
                    match=dict(body["spec"]["selector"]["matchLabels"]),
                    labels=labels,
                    image=image_now,
                    template_hash="c1",
                    handoff_id=run.ledger.handoff_id,
                )
                return
            existing.set_template(labels, image_now)
            existing.scale(0)
            existing.handoff_id = run.ledger.handoff_id

        self.c.write("apply the candidate at 0", change)
        yield "applied"
        if in_place:
            live = self.c.workloads[LIVE]
            yield from self.wait("the old pods to stop", lambda: live.ready == 0)
            yield from self.advance(Phase.OLD_STOPPED)
        applied = self.c.workloads[name]
        yield from self.advance(
            Phase.APPLIED,
            revision=revision,
            image=image,
            candidate_uid=applied.uid,
            candidate_template_sha256=template_sha256(applied.template()),
        )

    def _candidate_ready(self, replicas: int) -> Callable[[], bool]:
        revision = self.r.ledger.revision

        def ready() -> bool:
            candidate = self.c.workloads.get(self.cand)
            return (
                candidate is not None
                and candidate.labels.get(REVISION_LABEL) == revision
                and candidate.ready >= replicas
            )

        return ready

    def warm(self) -> Steps:
        if self.r.reached(Phase.WARM):
            return
        preview = self.spec.candidate.preview_replicas
        self.c.scale(self.cand, preview, expected=drift.candidate_replicas(self.r))
        yield "scaled to preview"
        yield from self.wait("the candidate's preview pods", self._candidate_ready(preview))
        yield from self.advance(Phase.WARM)

    def gates(self) -> Steps:
        if self.r.reached(Phase.APPROVED):
            return
        if self.gates_fail:
            raise GateFailed("latency fail")
        yield from self.advance(Phase.GATED, evidence_sha256="e" * 64)

    def approve(self) -> Steps:
        if self.r.reached(Phase.APPROVED):
            return
        yield from self.advance(Phase.APPROVED)

    def swap(self) -> Steps:
        """flows/swap.py: wait (reading) for a Ready pod of the target, one selector write
        against what it decided from, then the endpoints must lead to it alone."""
        run = self.r
        if run.reached(Phase.SWAPPED):
            return
        before = [run.ledger.snapshot.selector, *([run.ledger.pin] if run.ledger.pin else [])]
        yield from self.point_service(target_selector(run), before)
        yield from self.advance(Phase.SWAPPED)

    def point_service(self, target: dict[str, str], came_from: list[dict[str, str]]) -> Steps:
        yield from self.wait("a Ready pod of the target", lambda: self._ready_matching(target))
        self.c.update_selector(target, lambda s: s in came_from)
        yield "selector written"
        yield from self.verify(target)

    def verify(self, target: dict[str, str]) -> Steps:
        """swap.verify_service: the endpoints lead only to ready pods `target` matches."""

        def routes_only() -> bool:
            serving = self.c.endpoints()
            return bool(serving) and all(
                matches(target, self.c.workloads[n].pod_labels()) for n in serving
            )

        yield from self.wait("the endpoints to route only to the target", routes_only)

    def _ready_matching(self, selector: dict[str, str]) -> bool:
        return any(w.ready and matches(selector, w.pod_labels()) for w in self.c.workloads.values())

    def scale_up_and_retire(self) -> Steps:
        """flows.tasks.scale_up_and_retire with flows/scale.py (scale-up first)."""
        run = self.r
        self.check()
        if not run.reached(Phase.SCALED) and not run.twin:  # a twin stays at its preview
            target = self.spec.candidate.replicas
            self.c.scale(self.cand, target, expected=drift.candidate_replicas(self.r))
            yield "scaled up"
            yield from self.wait("the candidate's pods", self._candidate_ready(target))
        yield from self.advance(Phase.SCALED)
        self.check()
        if not run.reached(Phase.RETIRED):
            yield from self.bake()
            self.check()
            if run.twin:
                yield from self._rewrite_live_and_remove_twin()
            elif not self.spec.replaces_live:  # replaced in place, nothing is left
                # The Service must route to the candidate alone first.
                yield from self.verify(target_selector(run))
                self.c.scale(LIVE, 0, expected=run.recorded_replicas(LIVE))
                yield "retired"
            yield from self.advance(Phase.RETIRED)
        # flows.tasks.retire: done only once the Service is seen serving.
        serves = target_selector(run)
        yield from self.verify(live_only_selector(run, serves) if run.twin else serves)
        yield from self.advance(Phase.DONE)

    def _rewrite_live_and_remove_twin(self) -> Steps:
        """flows.scale._rewrite_live_and_remove_twin: the live Deployment takes the
        candidate's spec and count; the Service narrows to its pods; the twin goes."""
        run, c = self.r, self.c
        body = render_candidate(
            self.spec,
            self.manifest,
            pinned=run.ledger.image,
            revision=run.ledger.revision or "",
            replicas=self.spec.candidate.replicas,
            handoff_id=run.ledger.handoff_id,
        )
        template = body["spec"]["template"]
        labels = dict(template["metadata"]["labels"])
        live = c.workloads[LIVE]

        def change() -> None:
            live.set_template(labels, template["spec"]["containers"][0]["image"])
            live.scale(body["spec"]["replicas"])
            live.handoff_id = run.ledger.handoff_id

        c.write("apply the candidate's spec to the live Deployment", change)
        yield "live rewritten"
        yield from self.wait(
            "the live Deployment rolled out",
            lambda: live.labels == labels and live.ready >= live.replicas,
        )
        target = target_selector(run)
        yield from self.point_service(live_only_selector(run, target), came_from=[target])
        twin = c.workloads.get(TWIN)
        if twin is not None:
            if twin.handoff_id != run.ledger.handoff_id:
                raise WorkloadReplaced(f"Deployment {TWIN} is not this handoff's")
            c.delete(TWIN)
            yield "twin deleted"

    def bake(self) -> Steps:
        """flows/bake.py, side by side: the old pods stay Ready, serving nothing, while
        the bake watches (in place, flows.bake.way_back finds none: a breach is reported
        only and the run goes on); a breach moves the Service back to them at once
        (rollback.back_to_warm: the rollback recorded first, then the selector, waiting
        for a Ready old pod), stops the candidate (rollback.stop_breached) and fails the
        step, so the rollback finishes the rest."""
        back, _ = way_back(self.r)
        for _ in range(self.bake_looks):
            if self.bake_breach:
                break
            yield "baking"
        if not self.bake_breach:
            return
        if back is None:  # in place: nothing warm to go back to, so reported only
            yield "bake breached: reported only"
            return
        run = self.r
        ledger = self.c.save_ledger(run.ledger.to(Phase.ROLLING_BACK, cause="bake breached"))
        run.ledger = ledger
        yield "rolling back from the bake"
        pinned = self._pinned_to_restored(ledger)
        ledger = yield from self._move_selector(ledger, pinned or ledger.snapshot.selector)
        yield from self._undo_candidate(ledger)
        raise BakeBreached("bake breached: the Service is back on the warm old pods")

    # --- rollback (flows/rollback.py, side by side, separate candidate) ----
    def roll_back(self, cause: HandoffError) -> Steps:
        leave: list[str] = []
        if isinstance(cause, drift.PersonEdited):
            leave = cause.objects
        if isinstance(cause, SelectorEdited):
            leave = [f"Service {SERVICE}"]
        if isinstance(cause, ReplicasEdited):
            leave = [cause.object]
        yield from self.rollback(str(cause), leave)

    def rollback(self, cause: str, leave: list[str]) -> Steps:
        c = self.c
        ledger = c.ledger()
        if ledger is None or ledger.phase in TERMINAL:
            return
        self.run = self._run(ledger, ledger.pin)
        if not ledger.first_write_made:
            stopped = ledger.to(Phase.ROLLING_BACK).to(Phase.ROLLED_BACK, cause=cause[:200])
            self.r.ledger = c.save_ledger(stopped)
            yield "rolled back before the first write"
            return
        if ledger.phase is Phase.ROLLING_BACK:
            cause = ledger.cause or cause
            if not set(leave) <= set(ledger.edited):
                ledger = self._left(ledger, leave)
                yield "edits met since the rollback began recorded"
        else:
            edited = sorted({*ledger.edited, *leave})
            was = ledger.phase
            ledger = c.save_ledger(ledger.to(Phase.ROLLING_BACK, cause=cause[:200], edited=edited))
            self.r.ledger = ledger
            yield f"rolling back from {was}"
        problems: list[str] = []
        kept = set(ledger.edited)
        candidate = f"Deployment {self.cand}"

        def noted(part: Callable[[], Steps]) -> Steps:
            try:
                yield from part()
            except RestoreNotReady:
                raise
            except HandoffError as exc:
                problems.append(str(exc))

        in_place = ledger.strategy == Strategy.IN_PLACE
        if in_place and not self.spec.replaces_live and candidate not in kept:
            # rollback.rollback: it holds the GPUs the old pods need back, so it goes first.
            def candidate_first() -> Steps:
                yield from self._undo_candidate(ledger)
                yield from self.wait("the candidate to stop", self._candidate_stopped)

            yield from noted(candidate_first)
        elif candidate not in kept:
            yield from noted(lambda: self._candidate_to_preview(ledger))
        if f"Service {SERVICE}" not in kept:
            ledger = yield from self._back_through_twin(ledger, problems)
            kept = set(ledger.edited)
        for workload in ledger.snapshot.workloads:
            if f"Deployment {workload.name}" not in kept:
                yield from noted(partial(self._restore_workload, ledger, workload, problems))
        if f"Service {SERVICE}" in kept:

            def keep_service() -> Steps:
                if candidate not in kept and not self._routes_to_candidate():
                    yield from self._undo_candidate(ledger)

            yield from noted(keep_service)
        elif candidate in kept:
            target = self._pinned_to_restored(ledger) or ledger.snapshot.selector
            yield from noted(lambda: self._move_or_leave(ledger, target))
        else:
            yield from noted(lambda: self._selector_then_candidate(ledger))
        # rollback._as_recorded: with what its parts recorded (a pin, an edit).
        final = self._as_recorded(ledger)
        self.r.ledger = c.save_ledger(final.to(Phase.ROLLED_BACK, cause=cause[:200]))
        yield "rolled back"

    def _candidate_to_preview(self, ledger: Ledger) -> Steps:
        if self.spec.replaces_live:
            return
        retired = any(
            self.c.workloads[w.name].replicas < w.replicas for w in ledger.snapshot.workloads
        )
        candidate = self.c.workloads.get(CANDIDATE)
        preview = max(self.spec.candidate.preview_replicas, ledger.snapshot.candidate_replicas)
        if retired and candidate is not None and candidate.replicas > preview:
            self.c.scale(CANDIDATE, preview)
            yield "candidate to preview"

    def _rewritten(self, ledger: Ledger, workload: WorkloadSnapshot) -> bool:
        """rollback._rewritten: the live spec is this handoff's, not the recorded one."""
        current = self.c.workloads[workload.name]
        return (
            workload.spec is not None
            and current.snapshot().spec != workload.spec
            and current.handoff_id == ledger.handoff_id
            and current.labels.get(REVISION_LABEL) == ledger.revision
            and current.image == ledger.image
        )

    def _back_through_twin(
        self, ledger: Ledger, problems: list[str]
    ) -> Generator[str, None, Ledger]:
        """rollback._back_through_twin: the Service moves to a twin (the candidate's, or
        the recorded spec made one) before the live Deployment's spec is put back."""
        [workload] = ledger.snapshot.workloads
        if not (self.r.twin and workload.spec):
            return ledger
        if {f"Deployment {LIVE}", f"Deployment {TWIN}"} & set(ledger.edited):
            return ledger
        if not self._rewritten(ledger, workload):
            return ledger
        try:
            twin = yield from self._serving_twin(ledger, workload.spec)
            target = {**twin.match, WORKLOAD_LABEL: TWIN}
            ledger, moved = yield from self._move_or_leave(ledger, target)
        except HandoffError as exc:
            raise RestoreNotReady(f"no twin to move the Service to: {exc}") from exc
        live = self.c.workloads[LIVE]
        if not moved and live.replicas and matches(self.c.selector, live.pod_labels()):
            ledger = self._left(ledger, [f"Deployment {LIVE}"])
        return ledger

    def _serving_twin(
        self, ledger: Ledger, recorded: dict[str, Any]
    ) -> Generator[str, None, Workload]:
        """rollback._serving_twin: this handoff's twin, Ready, made if there is none."""
        twin = self.c.workloads.get(TWIN)
        if twin is not None and twin.handoff_id != ledger.handoff_id:
            raise WorkloadReplaced(f"Deployment {TWIN} is not this handoff's")
        if twin is None:
            template = recorded["template"]
            labels = {**template["metadata"]["labels"], WORKLOAD_LABEL: TWIN}
            made = Workload(
                name=TWIN,
                uid="uid-twin-back",
                replicas=self.spec.candidate.preview_replicas,
                match={**LIVE_SELECTOR, WORKLOAD_LABEL: TWIN},
                labels=labels,
                image=template["spec"]["containers"][0]["image"],
                template_hash="back1",
                handoff_id=ledger.handoff_id,
            )

            def change() -> None:
                self.c.workloads[TWIN] = made

            self.c.write("the recorded spec as the twin", change)
            yield "previous version as twin"
            twin = made
        ready = twin
        yield from self.wait("the twin rolled out", lambda: ready.ready >= ready.replicas)
        return twin

    def _restore_workload(
        self, ledger: Ledger, workload: WorkloadSnapshot, problems: list[str]
    ) -> Steps:
        current = self.c.workloads[workload.name]
        recorded = workload.spec
        if recorded is not None and current.snapshot().spec != recorded:
            if not self._rewritten(ledger, workload):
                problems.append(f"Deployment {workload.name}: a person's spec, left")
                return
            self.c.write(f"put back {workload.name}'s spec", partial(current.put_spec, recorded))
            yield f"put back {workload.name}"
        elif current.replicas != workload.replicas:
            self.c.scale(workload.name, workload.replicas, expected=restorable_from(workload))
            yield f"restored {workload.name}"
        try:
            yield from self.wait(
                f"{workload.name} rolled out", lambda: current.ready >= current.replicas
            )
        except HandoffError as exc:
            problems.append(str(exc))

    def _candidate_stopped(self) -> bool:
        candidate = self.c.workloads.get(self.cand)
        return candidate is None or candidate.ready == 0

    def _routes_to_candidate(self) -> bool:
        if self.spec.replaces_live and not self.r.twin:
            return False
        candidate = self.c.workloads.get(self.cand)
        return (
            candidate is not None
            and bool(candidate.replicas)
            and matches(self.c.selector, candidate.pod_labels())
        )

    def _undo_candidate(self, ledger: Ledger) -> Steps:
        """A twin is deleted (if it is this handoff's); a candidate goes back to its count."""
        candidate = self.c.workloads.get(self.cand)
        if self.r.twin:
            if candidate is not None and candidate.handoff_id == ledger.handoff_id:
                self.c.delete(TWIN)
                yield "twin deleted"
            return
        if self.spec.replaces_live:
            return  # the live Deployment itself was restored
        want = ledger.snapshot.candidate_replicas
        if candidate is not None and candidate.replicas != want:
            self.c.scale(self.cand, want)
            yield "candidate undone"

    def _left(self, ledger: Ledger, objects: list[str]) -> Ledger:
        """rollback._left."""
        edited = sorted({*ledger.edited, *objects})
        self.r.ledger = self.c.save_ledger(ledger.model_copy(update={"edited": edited}))
        return self.r.ledger

    def _selector_then_candidate(self, ledger: Ledger) -> Steps:
        pinned = self._pinned_to_restored(ledger)
        target = pinned or ledger.snapshot.selector
        ledger, moved = yield from self._move_or_leave(ledger, target)
        if not moved and self._routes_to_candidate():
            return  # the selector a person set routes to it: it keeps serving
        if self._routes_to_candidate():
            return  # a person pointed the Service back at it: left at its count
        yield from self._undo_candidate(ledger)
        if pinned and moved:
            yield from self.wait(
                "the candidate's pods to stop", lambda: not self._cand_matches(ledger)
            )
            yield from self._move_or_leave(ledger, ledger.snapshot.selector)

    def _move_or_leave(
        self, ledger: Ledger, target: dict[str, str]
    ) -> Generator[str, None, tuple[Ledger, bool]]:
        """rollback._move_or_leave: a person's selector met here stays, recorded."""
        try:
            ledger = yield from self._move_selector(ledger, target)
            return ledger, True
        except SelectorEdited:
            ledger = self._left(self._as_recorded(ledger), [f"Service {SERVICE}"])
            yield "selector left as edited"
            return ledger, False

    def _as_recorded(self, ledger: Ledger) -> Ledger:
        """rollback._as_recorded."""
        found = self.c.ledger()
        if found is None or found.handoff_id != ledger.handoff_id:
            return ledger
        return found if found.phase is Phase.ROLLING_BACK else ledger

    def _cand_matches(self, ledger: Ledger) -> bool:
        candidate = self.c.workloads.get(self.cand)
        return any(
            owned_by_deployment(p, self.cand) and matches(ledger.snapshot.selector, p.labels)
            for p in (candidate.pods() if candidate else [])
        )

    def _pinned_to_restored(self, ledger: Ledger) -> dict[str, str] | None:
        if self.cand in {w.name for w in ledger.snapshot.workloads}:
            return None
        if not self._cand_matches(ledger):
            return None
        live = self.c.workloads[LIVE]
        return {**ledger.snapshot.selector, "pod-template-hash": live.template_hash}

    def _move_selector(
        self, ledger: Ledger, target: dict[str, str]
    ) -> Generator[str, None, Ledger]:
        """rollback._move_selector: wait for a Ready pod of `target` while the Service has
        ready endpoints (RestoreNotReady past the wait); a Service with none moves at once,
        then waits likewise if something served before the handoff; a pin is recorded in
        the ledger before it is written; never over a selector `_written_by` does not
        recognise. Returns the ledger as last written."""
        serving = bool(self.c.endpoints())
        if serving:
            yield from self._restored_ready(target)
        if not _written_by(ledger, target):
            pins = [*ledger.rollback_pins, target]
            ledger = self.c.save_ledger(ledger.model_copy(update={"rollback_pins": pins}))
            self.r.ledger = ledger
            yield "pin recorded"
        recorded = ledger
        self.c.update_selector(target, lambda found: _written_by(recorded, found))
        yield "selector moved back"
        if not serving and ledger.snapshot.serving:
            yield from self._restored_ready(target)
        return ledger

    def _restored_ready(self, target: dict[str, str]) -> Steps:
        try:
            yield from self.wait(
                "a Ready pod to move back to", lambda: self._ready_matching(target)
            )
        except WaitTimedOut as exc:
            raise RestoreNotReady(f"no Ready pod of {target}: {exc}") from exc


def phase_of(cluster: Cluster) -> Phase | None:
    ledger = cluster.ledger()
    return None if ledger is None else ledger.phase
