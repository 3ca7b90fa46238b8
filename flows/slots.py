"""One handoff per Service in Prefect too: a global concurrency limit of one slot,
`handoff-<namespace>-<service>`, taken with strict=True (a missing limit is an error,
never a silent run without one), next to the Lease on the cluster.

The limit is created on first use. A run that died keeps its slot until the slot's
lease expires (LEASE_S), so resuming a known-unfinished handoff waits that long. A
handoff started by hand that finds the slot taken is refused quickly; one started by a
merge waits in line (queue_s) behind the Service's running handoff, as runs of one
Service are serialised here and not by the deployment (other Services go on meanwhile).

Only the time the slot is seen taken counts against the wait. Each ask is answered in
full, however slowly Prefect answers: a busy Prefect server is not a busy Service, and
an ask abandoned mid-request could be granted after all, leaving a slot held by nobody
until its lease ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress

import httpx
from prefect import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectAlreadyExists

from flows.lease import HandoffInProgress

LEASE_S = 60.0  # Prefect's shortest slot lease
REFUSE_AFTER_S = 5.0
POLL_S = 2.0  # how often a waiting run looks at the slot again


def limit_name(namespace: str, service: str) -> str:
    return f"handoff-{namespace}-{service}"


def ensure_limit(name: str) -> None:
    with get_client(sync_client=True) as client, suppress(ObjectAlreadyExists):
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))


@contextmanager
def service_slot(
    namespace: str, service: str, *, resuming: bool, queue_s: float = 0.0
) -> Iterator[None]:
    """Hold the Service's slot for the block; while another run holds it, wait up to
    queue_s (at least as long as a dead run's slot takes to expire when resuming, a
    few seconds otherwise), then refuse."""
    name = limit_name(namespace, service)
    ensure_limit(name)
    wait_s = max(queue_s, LEASE_S + 15.0 if resuming else REFUSE_AFTER_S)
    deadline = time.monotonic() + wait_s
    with ExitStack() as held:
        while not _take(held, name):
            left = deadline - time.monotonic()
            if left <= 0:
                raise HandoffInProgress(
                    f"Service {namespace}/{service} is being handed off by another run: its "
                    f"Prefect concurrency slot {name} stayed taken for {wait_s:.0f} s; let that "
                    "run finish"
                )
            time.sleep(min(POLL_S, left))
        yield


def _take(held: ExitStack, name: str) -> bool:
    """Take the slot into held if it is free; False while another run holds it."""
    if _taken(name):  # looking first keeps a long wait from piling up refused asks
        return False
    try:
        held.enter_context(
            concurrency(name, occupy=1, max_retries=0, lease_duration=LEASE_S, strict=True)
        )
    except ConcurrencySlotAcquisitionError as exc:
        refused = exc.__cause__
        if isinstance(refused, httpx.HTTPStatusError) and refused.response.status_code == 423:
            return False  # another run took it between the look and the ask
        raise
    return True


def _taken(name: str) -> bool:
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(name)
    return limit.active_slots >= limit.limit
