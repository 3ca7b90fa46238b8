"""The flow pod's termination grace covers the rollback a cancelled or evicted run may
have to make: prefect.yaml's Kubernetes deployment and the work pool's base job template
(manifests/work-pool/) give at least the sum of the rollback's declared waits, computed
here from the constants themselves, so raising a wait without raising the grace fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from flows import lease, render, rollback

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "manifests" / "work-pool" / "handoff-kubernetes.json"
DEPLOYMENT = "handoff-on-merge-kubernetes"
SHUTDOWN_S = 30.0  # Prefect reports the run's state and the process exits


def _declared(name: str) -> float:
    """A wait of flows/rollback.py (0 where this version does not declare it)."""
    return float(getattr(rollback, name, 0.0))


def rollback_bound_s() -> float:
    """The longest rollback, its waits one after another (prefect.yaml shows the sums):
    in place, or through a twin after the live Deployment took the candidate's spec."""
    rolls_out = render.DEFAULT_STARTUP_S + _declared("RESTORE_MARGIN_S")  # within its
    # allowance and a margin
    ready = _declared("READY_AFTER_RESTORE_S")  # a Ready pod before the selector moves
    end = (
        rollback.RESTORE_S  # the candidate's pods are gone (pinned)
        + lease.LEASE_S  # the writes' retries: fenced, they end within the Lease
        + SHUTDOWN_S
    )
    in_place = rollback.RESTORE_S + rolls_out + ready + end  # the candidate stops first
    through_twin = rolls_out + ready + rolls_out + ready + end  # the previous version's
    # twin rolls out and takes the Service, then the restored live Deployment
    return max(in_place, through_twin)


def grace_of(prefect_yaml: Path, template: Path) -> tuple[Any, Any]:
    """(the grace the deployment asks for, the pod's terminationGracePeriodSeconds the
    pool's template renders with it)."""
    deployments = yaml.safe_load(prefect_yaml.read_text())["deployments"]
    job_variables = next(d for d in deployments if d["name"] == DEPLOYMENT)["work_pool"][
        "job_variables"
    ]
    asked = job_variables.get("termination_grace_period_seconds")
    base = json.loads(template.read_text()) if template.is_file() else {}
    pod = (
        base.get("job_configuration", {})
        .get("job_manifest", {})
        .get("spec", {})
        .get("template", {})
        .get("spec", {})
    )
    placeholder = pod.get("terminationGracePeriodSeconds")
    if placeholder != "{{ termination_grace_period_seconds }}":
        return asked, placeholder
    variable = base["variables"]["properties"]["termination_grace_period_seconds"]
    return asked, asked if asked is not None else variable.get("default")


def test_the_flow_pod_gets_a_grace_period_long_enough_for_the_rollback() -> None:
    bound = rollback_bound_s()
    asked, rendered = grace_of(ROOT / "prefect.yaml", TEMPLATE)
    assert isinstance(asked, int) and asked >= bound, (
        f"prefect.yaml's {DEPLOYMENT} asks for a grace of {asked} s; the rollback may "
        f"wait {bound:.0f} s (tests/lease/test_grace.py, rollback_bound_s)"
    )
    assert rendered == asked, (
        f"{TEMPLATE.relative_to(ROOT)} does not put termination_grace_period_seconds in the "
        f"pod's terminationGracePeriodSeconds (found {rendered!r})"
    )


def test_the_pool_template_defaults_to_a_grace_long_enough_for_the_rollback() -> None:
    base = json.loads(TEMPLATE.read_text())
    default = base["variables"]["properties"]["termination_grace_period_seconds"]["default"]
    assert default >= rollback_bound_s()


def test_the_template_renders_the_grace_into_the_job() -> None:
    """As the worker does: Prefect fills the template with the deployment's variables."""
    from prefect.utilities.templating import apply_values

    asked, _ = grace_of(ROOT / "prefect.yaml", TEMPLATE)
    base = json.loads(TEMPLATE.read_text())
    job = apply_values(base["job_configuration"], {"termination_grace_period_seconds": asked})
    assert job["job_manifest"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == asked
