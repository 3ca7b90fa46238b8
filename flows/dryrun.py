"""The plan's server-side dry-runs: every write the handoff may make to Deployments, to
the Service and to the evidence bundles' ConfigMap, on the forward path and in a
rollback, is sent once with dryRun=All
before anything is changed, so a refusal (RBAC 403) or an admission rejection stops
the handoff at plan time. The apiserver authorises, validates and admits each one,
then persists nothing.

Writes not dry-run: the Lease (taken right after the plan, before any other write)
and the ledger and history annotations beyond the one Service patch shown here (the
same verb on the same object). A scale of a candidate that does not exist yet is
authorised and then answered 404: that counts as passing, since its admission can
only be checked once the apply created it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from pydantic import BaseModel, ConfigDict

from flows.capacity import Strategy
from flows.errors import HandoffError
from flows.kube import write
from flows.kube.bundles import BUNDLES_CONFIGMAP, store_bundle
from flows.kube.client import Kube, NotFound
from flows.kube.objects import DeploymentSnapshot, ServiceSnapshot
from flows.ledger import ANNOTATION
from flows.render import (
    candidate_name,
    is_twin,
    render_candidate,
    service_selector,
    unpinned_image,
)
from flows.spec import HandoffSpec


class DryRun(BaseModel):
    model_config = ConfigDict(frozen=True)

    write: str
    ok: bool
    detail: str = ""


def dry_run(writes: list[tuple[str, Callable[[], object]]]) -> list[DryRun]:
    """Send each planned write as a dry-run; one DryRun each."""
    results = []
    for name, call in writes:
        try:
            call()
            results.append(DryRun(write=name, ok=True))
        except NotFound:
            results.append(DryRun(write=name, ok=True, detail="authorised; created by the apply"))
        except HandoffError as exc:
            results.append(DryRun(write=name, ok=False, detail=str(exc)))
    return results


def planned_writes(
    kube: Kube,
    spec: HandoffSpec,
    *,
    service: ServiceSnapshot,
    current: list[DeploymentSnapshot],
    manifest: dict[str, Any],
    strategy: Strategy,
) -> list[tuple[str, Callable[[], object]]]:
    """Every write the handoff may make with this strategy, each as a dry-run call."""
    ns, twin = spec.namespace, is_twin(spec, str(strategy))
    candidate = candidate_name(spec, str(strategy))

    def body(*, twin: bool, replicas: int) -> dict[str, Any]:
        return render_candidate(
            spec,
            manifest,
            pinned=unpinned_image(spec, manifest),
            revision="plan",
            replicas=replicas,
            handoff_id="plan",
            twin=twin,
        )

    writes: list[tuple[str, Callable[[], object]]] = [
        (
            f"apply Deployment {candidate} at 0 replicas",
            lambda: write.apply_deployment(kube, body(twin=twin, replicas=0), dry_run=True),
        ),
        (
            f"patch Service {spec.service} selector and {ANNOTATION} (pin, swap, rollback)",
            lambda: write.patch_service(
                kube,
                ns,
                spec.service,
                resource_version=service.resource_version,
                selector=(service.selector, service_selector(manifest, "plan")),
                annotations={ANNOTATION: "{}"},
                dry_run=True,
            ),
        ),
        (
            f"create an Event on Service {spec.service}",
            lambda: write.record_event(
                kube,
                namespace=ns,
                kind="Service",
                name=spec.service,
                uid=service.uid,
                reason="HandoffPlanned",
                message="dry-run",
                dry_run=True,
            ),
        ),
        (
            f"store the evidence bundle in ConfigMap {BUNDLES_CONFIGMAP}",
            lambda: store_bundle(kube, ns, "plan", "{}", keep=lambda _: True, dry_run=True),
        ),
    ]
    if candidate not in {d.name for d in current}:
        writes.append(
            (
                f"scale Deployment {candidate} (warm-up, scale-up, rollback)",
                lambda: write.scale_deployment(kube, ns, candidate, 1, dry_run=True),
            )
        )
    for d in current:
        writes.append(
            (
                f"scale Deployment {d.name} (stop or retire, rollback)",
                partial(write.scale_deployment, kube, ns, d.name, 0, dry_run=True),
            )
        )
        if spec.replaces_live:
            writes.append(
                (
                    f"replace the spec of Deployment {d.name} (rollback)",
                    partial(
                        write.replace_deployment_spec,
                        kube,
                        ns,
                        d.name,
                        d.spec,
                        generation=d.generation,
                        dry_run=True,
                    ),
                )
            )
    if twin:
        writes += [
            (
                f"apply Deployment {spec.candidate.deployment} with the candidate's spec",
                lambda: write.apply_deployment(
                    kube, body(twin=False, replicas=spec.candidate.replicas), dry_run=True
                ),
            ),
            (
                f"delete Deployment {candidate} (the twin, once retired or rolled back)",
                lambda: write.delete_deployment(kube, ns, candidate, dry_run=True),
            ),
        ]
    return writes
