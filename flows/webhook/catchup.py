"""Catching up at start: ask prefect.yaml's reconcile deployment for one pass.

A relay that was down missed the deliveries its forge sent meanwhile, and forges do not
redeliver by themselves. With `--reconcile-on-start` the relay asks, once it serves, for a
reconcile pass (flows/reconcile.py), which starts the handoff of every spec whose branch
head was never handed off; none is asked for while one is scheduled or running.
"""

from __future__ import annotations

import logging
import threading

DEPLOYMENT = "handoff-reconcile/reconcile"
ACTIVE_STATES = frozenset({"SCHEDULED", "PENDING", "RUNNING", "PAUSED", "CANCELLING"})
log = logging.getLogger("handoff.webhook")


class PassUnavailable(RuntimeError):
    """The reconcile deployment is not there to ask."""


def request_pass(api_url: str) -> str | None:
    """Ask the reconcile deployment for a pass now: the new run's id, or None when a pass
    is already scheduled or running. PassUnavailable when the deployment is not there."""
    from prefect import get_client
    from prefect.client.schemas import filters
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        try:
            deployment = client.read_deployment_by_name(DEPLOYMENT)
        except ObjectNotFound:
            raise PassUnavailable(
                f"deployment {DEPLOYMENT} not found at {api_url}: deploy prefect.yaml "
                "(`prefect --no-prompt deploy --all`)"
            ) from None
        pending = client.read_flow_runs(
            deployment_filter=filters.DeploymentFilter(
                id=filters.DeploymentFilterId(any_=[deployment.id])
            ),
            flow_run_filter=filters.FlowRunFilter(
                state=filters.FlowRunFilterState(
                    type=filters.FlowRunFilterStateType(any_=sorted(ACTIVE_STATES))
                )
            ),
            limit=1,
        )
        if pending:
            return None
        return str(client.create_flow_run_from_deployment(deployment.id).id)


def catch_up(api_url: str) -> None:
    """request_pass, logged; never raises (the relay serves whatever Prefect answers)."""
    try:
        run = request_pass(api_url)
    except Exception as exc:  # an unreachable Prefect, a missing deployment
        log.warning("catching up at start: no reconcile pass asked for: %s", exc)
        return
    if run is None:
        log.info("catching up at start: a reconcile pass is already scheduled or running")
    else:
        log.info("catching up at start: reconcile pass %s asked for", run)


def catch_up_in_background(api_url: str) -> threading.Thread:
    thread = threading.Thread(target=catch_up, args=(api_url,), daemon=True, name="catch-up")
    thread.start()
    return thread
