"""The way back: how long a retired workload would take to serve again.

A retired workload is kept at 0 replicas, so going back to it is a cold start. Observes
its pods before they stop (each pod's creation-to-Ready, as the cluster recorded it) and
the namespace's history (the recorded starts of its image's repository); decides the
figure to show: the pods' own measured start, else the history's, else the startupProbe's
budget, else unknown. Changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from flows.downtime import container_of, recorded_starts, start_part
from flows.kube import read
from flows.kube.client import Kube
from flows.kube.objects import DeploymentSnapshot, owned_by_deployment
from flows.ledger import history_entries
from flows.render import split_image


class WayBack(BaseModel):
    """A retired workload's cost of coming back: seconds from scale-up to Ready."""

    model_config = ConfigDict(frozen=True)

    workload: str
    start_s: float | None
    basis: str

    def line(self) -> str:
        cost = "unknown" if self.start_s is None else f"about {self.start_s:.0f} s"
        return f"{self.workload}: {cost} to serve again from 0 ({self.basis})"


def decide_way_back(
    deployment: DeploymentSnapshot, measured_s: list[float], recorded_s: list[float]
) -> WayBack:
    """From this workload's pods' starts, else the history's, else its probes."""
    if measured_s:
        return WayBack(
            workload=deployment.name,
            start_s=round(max(measured_s), 1),
            basis=f"the longest start of its {len(measured_s)} pod(s), measured on the cluster",
        )
    if recorded_s:
        return WayBack(
            workload=deployment.name,
            start_s=round(max(recorded_s), 1),
            basis=f"the longest of {len(recorded_s)} start(s) of its image in the history",
        )
    template = deployment.spec["template"]["spec"]
    container = container_of(template, next(iter(deployment.images), None))
    if container.get("startupProbe"):
        part = start_part(container, [], deployment.name, "")
        return WayBack(workload=deployment.name, start_s=part.seconds, basis=part.basis)
    return WayBack(
        workload=deployment.name,
        start_s=None,
        basis="no start measured or recorded and no startupProbe to bound one",
    )


def way_back(
    kube: Kube, namespace: str, deployments: Iterable[DeploymentSnapshot]
) -> list[WayBack]:
    """Each workload's way back, observed now (before its pods stop)."""
    history: list[dict[str, Any]] = [
        e for s in read.list_services(kube, namespace) for e in history_entries(s.annotations)
    ]
    found = []
    for deployment in deployments:
        pods = read.list_pods(kube, namespace, deployment.selector)
        measured = [
            p.start_s
            for p in pods
            if owned_by_deployment(p, deployment.name) and p.start_s is not None
        ]
        repositories = {split_image(image)[0] for image in deployment.images.values()}
        recorded = [s for r in sorted(repositories) for s in recorded_starts(history, r)]
        found.append(decide_way_back(deployment, measured, recorded))
    return found
