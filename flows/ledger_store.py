"""Read and write the handoff ledger on the Service.

Every phase change is one merge patch of the Service's annotations, guarded by the
resourceVersion last read and retried on 409 by re-reading: a concurrent writer is
never overwritten blindly.
"""

from __future__ import annotations

import datetime as dt

from flows.errors import PermanentError
from flows.kube import read, write
from flows.kube.client import Conflict, Kube
from flows.ledger import ANNOTATION, TERMINAL, Ledger, parse_ledger
from flows.spec import HandoffSpec


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_ledger(kube: Kube, spec: HandoffSpec) -> Ledger | None:
    service = read.read_service(kube, spec.namespace, spec.service)
    return parse_ledger(service.annotations)


def save_ledger(
    kube: Kube,
    spec: HandoffSpec,
    ledger: Ledger,
    *,
    extra: dict[str, str | None] | None = None,
    since: Ledger | None = None,
) -> Ledger:
    """Write the ledger (and any extra annotations) with a resourceVersion precondition.
    since: the ledger this run last wrote; the Service must still hold exactly it (the
    same handoff, phase and stamp), else another writer moved it (a `handoff rollback`,
    another run that took over and finished) and this run stops instead of undoing that."""
    stamped = ledger.model_copy(update={"updated_at": now_iso()})

    def changes(annotations: dict[str, str]) -> dict[str, str | None]:
        on_cluster = parse_ledger(annotations)
        # Holding `stamped` is this very write, retried after its answer was lost.
        if since is not None and _moved(on_cluster, since) and _moved(on_cluster, stamped):
            found = (
                "no ledger"
                if on_cluster is None
                else f"handoff {on_cluster.handoff_id} at {on_cluster.phase} "
                f"(written {on_cluster.updated_at})"
            )
            raise PermanentError(
                f"Service {spec.namespace}/{spec.service}: its ledger shows {found}, not "
                f"what handoff {since.handoff_id} last wrote ({since.phase}, "
                f"{since.updated_at}): another writer moved it; this run stops without "
                f"recording {ledger.phase}. See `handoff history` and the Service's "
                "handoff.dev/ledger annotation"
            )
        if (
            on_cluster is not None
            and on_cluster.handoff_id != ledger.handoff_id
            and on_cluster.phase not in TERMINAL
        ):
            raise PermanentError(
                f"Service {spec.namespace}/{spec.service} is held by handoff "
                f"{on_cluster.handoff_id} ({on_cluster.phase}), not {ledger.handoff_id}: "
                "another run took over; stop this one"
            )
        return {ANNOTATION: stamped.dump(), **(extra or {})}

    try:
        write.update_service_annotations(kube, spec.namespace, spec.service, changes)
    except Conflict as exc:
        raise PermanentError(f"could not record phase {ledger.phase}: {exc}") from exc
    return stamped


def _moved(on_cluster: Ledger | None, since: Ledger) -> bool:
    if on_cluster is None:
        return True
    mine = (since.handoff_id, since.phase, since.updated_at)
    return (on_cluster.handoff_id, on_cluster.phase, on_cluster.updated_at) != mine
