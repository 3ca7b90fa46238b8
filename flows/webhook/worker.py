"""The relay's worker: takes queued deliveries from the store and gives each a final outcome.

Deliveries of one repository are worked on one at a time, in the order they arrived
(one waiting for its next attempt lets the later ones go: the flow orders merges by
merge time, not by arrival); up to `max_deliveries` repositories at once. Each
attempt: the repository check (full name and clone URL against the configured ones:
another repository's delivery is `refused`), a fetch of the merge into the mirror and
its changed files from `git diff` there (never the payload's list), the specs at the
merge commit, then one intent per affected (spec, merge) recorded before its event is
emitted (deliveries.py), so each pair is emitted once. Prefect unreachable or refusing,
git failing or past its deadline: the delivery is tried again after a backoff (1 s,
doubling, at most `max_backoff_s`) until `retry_for_s` has passed since it arrived; a
merge commit missing from the fetched branch is tried `MISSING_TRIES` times (a replica
may lag). Then it is `refused` with the last error. A restarted relay resumes where
the store says.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from pathlib import PurePosixPath
from typing import Any

from flows.webhook.deliveries import DeliveryStore, Queued
from flows.webhook.event_signature import signing_key
from flows.webhook.events import MergeEvent, PrefectApiError, build_event, emit_events
from flows.webhook.gitcmd import clip
from flows.webhook.mirror import (
    MirrorError,
    MirrorRefused,
    MissingCommit,
    Upstream,
    fetch_merge,
)
from flows.webhook.payload import Merge, NotAMerge, parse_merge, read_headers
from flows.webhook.prefect_auth import PrefectAuthProblem, check_prefect_auth
from flows.webhook.repository import identity_problem
from flows.webhook.settings import RelaySettings
from flows.webhook.specs import HandoffTarget, index_specs

log = logging.getLogger("handoff.webhook")
MISSING_TRIES = 3
IDLE_WAIT_S = 1.0


class _Retry(Exception):
    """This attempt failed in a way another attempt may not."""

    def __init__(self, detail: str, *, tries: int | None = None) -> None:
        super().__init__(detail)
        self.detail, self.tries = detail, tries


class _Final(Exception):
    def __init__(self, outcome: str, detail: str) -> None:
        super().__init__(detail)
        self.outcome, self.detail = outcome, detail


class Worker:
    """Threads working the store's queue until stopped; `wake()` on each new delivery."""

    def __init__(self, settings: RelaySettings, store: DeliveryStore, upstream: Upstream) -> None:
        self.settings, self.store, self.upstream = settings, store, upstream
        self.event_key = signing_key(settings.event_key_file)  # None: events unsigned
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._prefect_checked = False

    def start(self) -> None:
        for n in range(self.settings.max_deliveries):
            thread = threading.Thread(target=self._run, name=f"relay-worker-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                queued = self.store.next_due(self._busy)
                if queued is not None:
                    self._busy.add(queued.repository)
            if queued is None:
                wait = self.store.seconds_to_next()
                self._wake.wait(IDLE_WAIT_S if wait is None else min(wait, IDLE_WAIT_S))
                self._wake.clear()
                continue
            try:
                self._attempt(queued)
            except Exception:  # a bug must not end the worker: the delivery stays queued
                log.exception("delivery %s: attempt failed unexpectedly", queued.id)
                self.store.retry_later(queued.id, "internal error (see the relay's log)", 60.0)
            finally:
                with self._lock:
                    self._busy.discard(queued.repository)
                self._wake.set()  # the repository's next delivery may go now

    def _attempt(self, queued: Queued) -> None:
        try:
            outcome, detail, handoffs, events = self._process(queued)
        except _Final as final:
            log.info("delivery %s: %s: %s", queued.id, final.outcome, clip(final.detail, 300))
            self.store.finish(queued.id, final.outcome, final.detail)
            return
        except _Retry as retry:
            attempts = queued.attempts + 1
            waited = time.time() - queued.received
            if (retry.tries is not None and attempts >= retry.tries) or (
                waited >= self.settings.retry_for_s
            ):
                detail = (
                    f"gave up after {attempts} attempt(s) over {waited:.0f} s: {retry.detail}; "
                    "fix the cause, then redeliver it from the forge"
                )
                log.warning("delivery %s: refused: %s", queued.id, clip(detail, 300))
                self.store.finish(queued.id, "refused", detail)
                return
            delay = min(2.0 ** (attempts - 1), self.settings.max_backoff_s)
            log.info(
                "delivery %s: attempt %d failed, again in %.1f s: %s",
                queued.id,
                attempts,
                delay,
                clip(retry.detail, 300),
            )
            self.store.retry_later(queued.id, f"retrying: {retry.detail}", delay)
            return
        log.info("delivery %s: %s: %s", queued.id, outcome, clip(detail, 300))
        self.store.finish(queued.id, outcome, detail, handoffs=handoffs, events=events)

    def _process(self, queued: Queued) -> tuple[str, str, list[str], list[str]]:
        merge = _merge_of(self.settings, queued)
        problem = identity_problem(self.settings, merge)
        if problem:
            raise _Final("refused", problem)
        targets, changed = self._read_merge(merge)
        now = dt.datetime.now(dt.UTC)
        wanted = {
            f"{t.name}@{merge.merge_commit}": build_event(
                _merge_event(t, merge, queued.id, changed), occurred=now, key=self.event_key
            )
            for t in targets
        }
        emits = self.store.intend(queued.id, wanted)
        for key, holder in emits.earlier.items():
            log.info("%s already emitted for delivery %s", key, holder)
        if emits.to_send:
            self._emit(emits.to_send)
            self.store.emitted(emits.keys)
        if not emits.to_send:
            detail = f"merge {merge.merge_commit[:12]}: no handoff affected" + (
                f" that was not emitted before ({', '.join(sorted(emits.earlier))})"
                if emits.earlier
                else ""
            )
            return "no-handoff", detail, [], []
        specs = [e["payload"]["spec"] for e in emits.to_send]
        return (
            "emitted",
            f"merge {merge.merge_commit[:12]}: {len(specs)} handoff(s) triggered",
            specs,
            [e["id"] for e in emits.to_send],
        )

    def _read_merge(self, merge: Merge) -> tuple[list[HandoffTarget], frozenset[str]]:
        """The affected handoffs and the changed files, read from the mirror at the merge."""
        settings = self.settings
        specs_in_repo = settings.specs_dir.resolve().relative_to(settings.repo_root.resolve())
        deadline = time.monotonic() + settings.git_timeout_s
        try:
            with fetch_merge(
                self.upstream, merge, PurePosixPath(specs_in_repo.as_posix()), deadline=deadline
            ) as merged:
                changed = merged.changed_files()
                index = index_specs(merged.tree / specs_in_repo, merged.tree)
        except MirrorRefused as exc:
            raise _Final("refused", str(exc)) from None
        except MissingCommit as exc:
            raise _Retry(str(exc), tries=MISSING_TRIES) from None
        except MirrorError as exc:
            raise _Retry(str(exc)) from None
        for error in index.errors:
            log.warning("spec skipped: %s", error)
        return index.affected(changed), changed

    def _emit(self, events: list[dict[str, Any]]) -> None:
        settings = self.settings
        try:
            if not self._prefect_checked:
                state = check_prefect_auth(
                    settings.prefect_api_url, timeout_s=settings.prefect_timeout_s
                )
                if state == "open" and not settings.insecure_prefect:
                    raise _Retry(
                        f"Prefect API {settings.prefect_api_url} accepts requests without "
                        "authentication: the relay emits nothing there; protect it "
                        "(PREFECT_SERVER_API_AUTH_STRING) or restart the relay with "
                        "--insecure-prefect"
                    )
                self._prefect_checked = True
            emit_events(settings.prefect_api_url, events, timeout_s=settings.prefect_timeout_s)
        except (PrefectApiError, PrefectAuthProblem) as exc:
            raise _Retry(str(exc)) from None


def _merge_of(settings: RelaySettings, queued: Queued) -> Merge:
    """The stored delivery read again (it passed these checks when it was accepted)."""
    try:
        forge, event, _ = read_headers(queued.headers)
        merge = parse_merge(forge, event, json.loads(queued.body), branch=settings.branch)
    except ValueError as exc:
        raise _Final("refused", f"the stored delivery no longer reads: {exc}") from None
    if isinstance(merge, NotAMerge):
        raise _Final("ignored", merge.reason)
    return merge


def _merge_event(
    target: HandoffTarget, merge: Merge, delivery: str, changed: frozenset[str]
) -> MergeEvent:
    return MergeEvent(
        spec=target.name,
        spec_file=target.spec_file,
        namespace=target.namespace,
        service=target.service,
        delivery_id=delivery,
        merge_commit=merge.merge_commit,
        merged_at=merge.merged_at,
        repository=merge.repository,
        branch=merge.branch,
        source=merge.forge,
        kind=merge.kind,
        changed=sorted(target.paths & changed),
    )
