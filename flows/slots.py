"""One handoff per Service in Prefect too: a global concurrency limit of one slot,
`handoff-<namespace>-<service>`, taken with strict=True (a missing limit is an error,
never a silent run without one), next to the Lease on the cluster.

The limit is created on first use. A run that died keeps its slot until the slot's
lease expires (LEASE_S), so resuming a known-unfinished handoff waits that long; a new
handoff that finds the slot taken is refused quickly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress

from prefect import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectAlreadyExists

from flows.lease import HandoffInProgress

LEASE_S = 60.0  # Prefect's shortest slot lease
REFUSE_AFTER_S = 5.0


def limit_name(namespace: str, service: str) -> str:
    return f"handoff-{namespace}-{service}"


def ensure_limit(name: str) -> None:
    with get_client(sync_client=True) as client, suppress(ObjectAlreadyExists):
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))


@contextmanager
def service_slot(namespace: str, service: str, *, resuming: bool) -> Iterator[None]:
    """Hold the Service's slot for the block; refuse if another handoff holds it."""
    name = limit_name(namespace, service)
    ensure_limit(name)
    wait_s = LEASE_S + 15.0 if resuming else REFUSE_AFTER_S
    try:
        with concurrency(
            name, occupy=1, timeout_seconds=wait_s, lease_duration=LEASE_S, strict=True
        ):
            yield
    except TimeoutError as exc:
        raise HandoffInProgress(
            f"Service {namespace}/{service} is being handed off by another run: its Prefect "
            f"concurrency slot {name} stayed taken for {wait_s:.0f} s; let that run finish"
        ) from exc
