"""Notice a person's edits made while a handoff runs, before the flow writes over them.

Observes the Service and the Deployments the handoff works on; compares them with what
the ledger recorded before the first write (the live Deployments' uid, generation and
replicas) and with what the handoff itself has written since (the selectors it sets,
the candidate it applied). Decides: any other difference is a person's (or another
tool's) edit, and the handoff stops (`PersonEdited`, naming the object and the field);
its rollback then leaves every edited object as it was found. A Service deleted
mid-handoff is `ServiceGone`: it is never recreated. Changes nothing itself.

Runs before and after every step, so the long waits (the image, an approval, the
gates) are followed by a check, and so is every step's first write.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from flows.errors import PermanentError
from flows.kube import read
from flows.kube.client import NotFound
from flows.kube.objects import DeploymentSnapshot
from flows.ledger import Phase, WorkloadSnapshot
from flows.render import HANDOFF_ID_ANNOTATION, template_sha256
from flows.run import HandoffRun
from flows.swap import live_only_selector, target_selector

DELETED = "deleted"


class Change(BaseModel):
    """One field of one object that differs from what the handoff recorded or wrote."""

    model_config = ConfigDict(frozen=True)

    kind: str
    name: str
    field: str
    expected: str
    observed: str

    @property
    def object(self) -> str:
        """The key the rollback leaves alone: `Deployment NAME` or `Service NAME`."""
        return f"{self.kind} {self.name}"

    def line(self, namespace: str) -> str:
        if self.observed == DELETED:
            return f"{self.kind} {namespace}/{self.name} was deleted ({self.expected})"
        return (
            f"{self.kind} {namespace}/{self.name} {self.field}: expected {self.expected}, "
            f"found {self.observed}"
        )


class PersonEdited(PermanentError):
    """Someone changed an object this handoff works on while it ran."""

    def __init__(
        self, run: HandoffRun, changes: list[Change], *, failure: BaseException | None = None
    ) -> None:
        namespace = run.spec.namespace
        self.objects = sorted({c.object for c in changes})
        # A step that failed meanwhile failed on the edit, most likely; its words are kept.
        met = f" (the step met it as: {failure})" if failure is not None else ""
        super().__init__(
            f"handoff {run.ledger.handoff_id} stopped at phase {run.ledger.phase}: changed "
            f"while it ran, not by it: {'; '.join(c.line(namespace) for c in changes)}"
            f"{met}. Nothing of that was overwritten: the rollback leaves those objects as "
            "they are now. Check that the change was meant, then run the handoff again (it "
            "plans from the cluster as it is then)"
        )


class ServiceGone(PermanentError):
    """The Service was deleted (or deleted and created again) during the handoff."""


def check(run: HandoffRun) -> None:
    """Raise PersonEdited (or ServiceGone) if the cluster differs from what this handoff
    recorded and wrote; return quietly otherwise."""
    changes = observe(run)
    if changes:
        raise PersonEdited(run, changes)


def observe(run: HandoffRun) -> list[Change]:
    """The differences; [] for a handoff rolling back or over (the rollback owns those)."""
    spec = run.spec
    if run.ledger.phase in (Phase.ROLLING_BACK, Phase.ROLLED_BACK, Phase.DONE):
        return []
    try:
        service = read.read_service(run.kube, spec.namespace, spec.service)
    except NotFound as exc:
        raise service_gone(run, "was deleted") from exc
    if service.uid != run.plan.service.uid:
        raise service_gone(run, f"was deleted and created again (uid {service.uid})")
    changes: list[Change] = []
    allowed = written_selectors(run)
    if service.selector not in allowed:
        changes.append(
            Change(
                kind="Service",
                name=spec.service,
                field="spec.selector",
                expected=" or ".join(str(s) for s in allowed),
                observed=str(service.selector),
            )
        )
    if live_untouched(run):
        changes += _live_changes(run)
    if run.reached(Phase.APPLIED) and not run.reached(Phase.RETIRED):
        changes += _candidate_changes(run, service.selector)
    return changes


def service_gone(run: HandoffRun, what: str) -> ServiceGone:
    spec = run.spec
    return ServiceGone(
        f"Service {spec.namespace}/{spec.service} {what} during handoff "
        f"{run.ledger.handoff_id} (phase {run.ledger.phase}); it is not recreated (a new "
        "Service would get a new ClusterIP, and its owner decides what it should be). The "
        "Deployments are put back as they were; recreate the Service from its manifest, "
        "then run the handoff again"
    )


def written_selectors(run: HandoffRun) -> list[dict[str, str]]:
    """The selectors the Service may have now: the one before the handoff, and each
    one this handoff sets (the pin, then the candidate's, then a twin's live-only)."""
    ledger = run.ledger
    found = [ledger.snapshot.selector]
    if ledger.pin:
        found.append(ledger.pin)
    if ledger.revision:
        target = target_selector(run)
        found.append(target)
        if run.twin:
            found.append(live_only_selector(run, target))
    return found


def live_untouched(run: HandoffRun) -> bool:
    """The handoff has not written the live Deployments yet: in place it stops them at
    the apply; side by side it scales or rewrites them at the retirement."""
    if run.ledger.strategy == "in-place":
        return run.ledger.outage is None and not run.reached(Phase.OLD_STOPPED)
    return not run.reached(Phase.RETIRED)


def _deployment(name: str, field: str, expected: object, observed: object) -> Change:
    return Change(
        kind="Deployment", name=name, field=field, expected=str(expected), observed=str(observed)
    )


def _live_changes(run: HandoffRun) -> list[Change]:
    changes: list[Change] = []
    for recorded in run.ledger.snapshot.workloads:
        name = recorded.name
        found = read.read_deployment(run.kube, run.spec.namespace, name)
        if found is not None and _retired_by_this_handoff(run, recorded, found):
            continue
        if found is None:
            changes.append(_deployment(name, "(the object)", "live before the handoff", DELETED))
        elif recorded.uid and found.uid != recorded.uid:
            changes.append(
                _deployment(name, "metadata.uid", recorded.uid, f"{found.uid} (recreated)")
            )
        elif found.replicas != recorded.replicas:
            changes.append(_deployment(name, "spec.replicas", recorded.replicas, found.replicas))
        elif recorded.generation and found.generation != recorded.generation:
            edited = f"{found.generation} (its spec was edited or rolled)"
            changes.append(_deployment(name, "metadata.generation", recorded.generation, edited))
    return changes


def _retired_by_this_handoff(
    run: HandoffRun, recorded: WorkloadSnapshot, found: DeploymentSnapshot
) -> bool:
    """After the swap the retirement may have begun (a rerun, or a retirement before the
    scale-up): the same live Deployment at 0 replicas, or through a twin rewritten with
    this handoff's id, is its write, not a person's."""
    if not run.reached(Phase.SWAPPED) or recorded.uid not in (None, found.uid):
        return False
    if run.twin:
        return found.annotations.get(HANDOFF_ID_ANNOTATION) == run.ledger.handoff_id
    return found.replicas == 0


def _candidate_changes(run: HandoffRun, selector: dict[str, str]) -> list[Change]:
    name = run.candidate_name
    found = read.read_deployment(run.kube, run.spec.namespace, name)
    if found is None:
        if _twin_removed_by_this_handoff(run, selector):
            return []
        return [_deployment(name, "(the object)", "the candidate this handoff applied", DELETED)]
    owner = found.annotations.get(HANDOFF_ID_ANNOTATION)
    if owner != run.ledger.handoff_id:
        field = f"metadata.annotations[{HANDOFF_ID_ANNOTATION}]"
        return [_deployment(name, field, run.ledger.handoff_id, owner)]
    ledger = run.ledger
    if ledger.candidate_uid and found.uid != ledger.candidate_uid:
        return [_deployment(name, "metadata.uid", ledger.candidate_uid, f"{found.uid} (recreated)")]
    gated = ledger.candidate_template_sha256
    if gated and template_sha256(found.spec["template"]) != gated:
        # `kubectl set image` and the like keep the revision label: the pods would no
        # longer be the ones the gates passed.
        images = ", ".join(f"{c}={i}" for c, i in sorted(found.images.items()))
        edited = f"another template (images {images})"
        return [
            _deployment(name, "spec.template", f"the template applied ({ledger.image})", edited)
        ]
    allowed = candidate_replicas(run)
    if found.replicas not in allowed:
        expected = " or ".join(str(n) for n in sorted(allowed))
        return [_deployment(name, "spec.replicas", expected, found.replicas)]
    return []


def _twin_removed_by_this_handoff(run: HandoffRun, selector: dict[str, str]) -> bool:
    """A twin's retirement removes it only once the Service selects the rewritten live
    pods alone: a twin gone then is this handoff's own deletion (a rerun after a crash
    in the retirement finds it so), not a person's."""
    if not (run.twin and run.reached(Phase.SWAPPED)):
        return False
    return selector == live_only_selector(run, target_selector(run))


def candidate_replicas(run: HandoffRun) -> set[int]:
    """The counts this handoff gives the candidate by its phase: 0 at the apply, the
    preview while it warms and is gated, the target from the scale-up on (a twin stays
    at its preview: the live Deployment takes the target)."""
    preview, target = run.spec.candidate.preview_replicas, run.spec.candidate.replicas
    if not run.reached(Phase.WARM):
        return {0, preview}
    if run.twin or not run.reached(Phase.SWAPPED):
        return {preview}
    if run.reached(Phase.SCALED):
        return {target}
    return {preview, target}
