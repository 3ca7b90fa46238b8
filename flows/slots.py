"""One handoff per Service in Prefect too: a global concurrency limit of one slot,
`handoff-<namespace>-<service>`, next to the Lease on the cluster. The limit is created on
first use; a missing one is an error, never a silent run without it.

A handoff started by hand that finds the slot taken is refused quickly; one started by a
merge waits in line (queue_s) behind the Service's running handoff, as runs of one
Service are serialised here and not by the deployment (other Services go on meanwhile).
Only the time the slot is seen taken counts against the wait. Each ask is answered in
full, however slowly Prefect answers: a busy Prefect server is not a busy Service, and
an ask abandoned mid-request could be granted after all, leaving a slot held by nobody
until its lease ends.

The slot is held with a lease of LEASE_S, renewed every RENEW_S while the run holds it;
a run that died keeps its slot until the lease ends, so resuming a known-unfinished
handoff waits that long. A renewal that fails (Prefect restarting or out of reach) is
tried again at the next turn and never stops the run: the Lease on the cluster is what
keeps two handoffs apart, and Prefect's own `concurrency(strict=True)` would cancel the
run mid-step instead. A Prefect server that keeps its leases in memory (its default)
forgets them when it restarts while the slot stays counted; the run, told so while its
lease cannot have expired, releases the slot by name as it leaves, as nothing else would.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from uuid import UUID

import httpx
from prefect import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.exceptions import ObjectAlreadyExists

from flows.errors import PermanentError
from flows.lease import HandoffInProgress

LEASE_S = 60.0  # Prefect's shortest slot lease
RENEW_S = LEASE_S / 6  # a lease outlives a Prefect restart or outage of some 50 s
REFUSE_AFTER_S = 5.0
POLL_S = 2.0  # how often a waiting run looks at the slot again

log = logging.getLogger(__name__)


def limit_name(namespace: str, service: str) -> str:
    return f"handoff-{namespace}-{service}"


def free_command(name: str) -> str:
    """The command that frees a slot no run holds."""
    return f"prefect global-concurrency-limit update {name} --active-slots 0"


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
                    "run finish. If no handoff of the Service is running (a slot left taken "
                    "by a Prefect server that lost its leases), free it with "
                    f"`{free_command(name)}`"
                )
            time.sleep(min(POLL_S, left))
        yield


def _take(held: ExitStack, name: str) -> bool:
    """Take the slot into held if it is free; False while another run holds it."""
    if _taken(name):  # looking first keeps a long wait from piling up refused asks
        return False
    asked = time.monotonic()
    try:
        with get_client(sync_client=True) as client:
            answer = client.increment_concurrency_slots_with_lease(
                [name], 1, "concurrency", LEASE_S
            ).json()
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code == 423:
            return False  # another run took it between the look and the ask
        raise
    lease = _SlotLease(name, UUID(answer["lease_id"]), taken_at=asked, renewed_at=asked)
    if not answer["limits"]:  # the limit was deleted since ensure_limit
        lease.release()
        raise PermanentError(
            f"Prefect has no global concurrency limit {name} (deleted while the run "
            "started?): run the handoff again, which creates it"
        )
    held.enter_context(lease.held())
    return True


def _taken(name: str) -> bool:
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(name)
    return limit.active_slots >= limit.limit


@dataclass
class _SlotLease:
    """A slot taken under a lease: renewed while held, released once."""

    name: str
    id: UUID
    taken_at: float  # monotonic
    renewed_at: float  # monotonic time of the ask that last set its expiry
    gone: bool = False  # Prefect answered that it no longer knows the lease
    forgotten: bool = False  # ... before it could have expired: the slot is still counted
    _stop: threading.Event = field(default_factory=threading.Event)

    @contextmanager
    def held(self) -> Iterator[None]:
        # The renewals ask the Prefect API this context's settings name.
        renewer = threading.Thread(
            target=contextvars.copy_context().run, args=(self._renew_until_stopped,), daemon=True
        )
        renewer.start()
        try:
            yield
        finally:
            self._stop.set()
            renewer.join()
            self.release()

    def _renew_until_stopped(self) -> None:
        while not self.gone and not self._stop.wait(RENEW_S):
            try:
                self._renew()
            except httpx.HTTPError as exc:  # tried again at the next turn
                log.warning("Prefect slot %s: lease not renewed (%s)", self.name, exc)

    def _renew(self) -> None:
        asked = time.monotonic()
        try:
            with get_client(sync_client=True, httpx_settings={"timeout": RENEW_S}) as client:
                client.renew_concurrency_lease(self.id, LEASE_S)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code != 410:
                raise
            self.gone = True
            self.forgotten = time.monotonic() < self.renewed_at + LEASE_S
            if self.forgotten:
                log.warning(
                    "Prefect slot %s: the server forgot lease %s before it could expire (it "
                    "keeps leases in memory and restarted); the slot is released by name as "
                    "the run leaves. Start the server with "
                    "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE="
                    "prefect.server.concurrency.lease_storage.filesystem",
                    self.name,
                    self.id,
                )
            else:
                log.warning(
                    "Prefect slot %s: lease %s expired, not renewed for %.0f s; another run "
                    "may hold the slot now",
                    self.name,
                    self.id,
                    LEASE_S,
                )
            return
        self.renewed_at = asked

    def release(self) -> None:
        """Release with the lease; a forgotten lease's slot by name. A failure is logged,
        not raised: it must not hide how the run ended, and the lease ends by itself."""
        try:
            if not self.gone:
                self._renew()  # asks whether Prefect still knows the lease
            with get_client(sync_client=True) as client:
                if not self.gone:
                    client.release_concurrency_slots_with_lease(self.id)
                elif self.forgotten:
                    held_s = time.monotonic() - self.taken_at
                    client.release_concurrency_slots([self.name], 1, held_s)
        except httpx.HTTPError as exc:
            log.warning(
                "Prefect slot %s not released (%s): it frees itself within %.0f s, unless "
                "the server lost its lease; then free it with `%s`",
                self.name,
                exc,
                LEASE_S,
                free_command(self.name),
            )
