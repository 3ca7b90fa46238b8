"""The reconciler: hand off every spec whose branch head was never handed off.

A merge whose delivery never arrived (a forge outage, a lost hook, a run that failed
before its first write after older ones were superseded) is found here. Observes: the
specs of a checkout of the branch (its head commit), each Service's history annotation,
the handoff runs Prefect holds and its `handoff.merge` events. Decides, per spec:
- handed off: the newest `done` record of the spec names the head's digest (spec,
  manifest and golden file, flows/source_tree.py), or a commit whose files have it;
- the gates turned the head down: its newest attempt rolled back with a gate that did
  not pass (a new merge, or `handoff run` by a person, tries again);
- a run of the spec is active or queued, or a merge event for the head still waits for
  its run;
- otherwise start it. Changes: one `handoff.merge` event (source `reconciler`), which
  the deployment's trigger turns into a run, as a merge's would be.

Idempotent: the event's id is derived from the head and the number of the reconciler's
earlier runs of it, so a second pass before the run exists emits the same id (Prefect
starts one run per event id) and finds the event waiting; a pass after it finds the run.
A head whose reconciler runs ended MAX_ATTEMPTS times without a record is left to a person.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger
from pydantic import BaseModel

from flows.kube import read
from flows.kube.client import KubeError, connect
from flows.ledger import history_entries
from flows.report.prefect_runs import HANDOFF_FLOW, RUN_LIMIT
from flows.source_tree import files_digest, git, read_commit, read_worktree
from flows.spec_paths import specs_dir as default_specs_dir
from flows.webhook.catchup import ACTIVE_STATES
from flows.webhook.event_signature import signing_key
from flows.webhook.events import (
    MergeEvent,
    ReceivedMerge,
    build_event,
    emit_events,
    read_merge_events,
    service_key,
    wait_persisted,
)
from flows.webhook.specs import HandoffTarget, find_repo_root, index_specs

SOURCE = "reconciler"
MAX_ATTEMPTS = 3
# A merge event younger than this without its run yet is the trigger's to act on.
EVENT_WAIT_S = 600.0


class Head(BaseModel):
    commit: str
    committed_at: dt.datetime
    repository: str
    branch: str


class SeenRun(BaseModel):
    """A handoff flow run, as far as the reconciler cares."""

    id: str
    state: str  # the state type: SCHEDULED, RUNNING, COMPLETED, ...
    spec_file: str
    spec: str | None  # its handoff:<spec> tag, once the run has started
    trigger: dict[str, Any]


class Decision(BaseModel):
    spec: str
    service: str
    head: str
    action: Literal["start", "skip"]
    reason: str
    delivery_id: str | None = None
    started: bool = False  # the event was emitted (not a dry run)


def _same_spec(run: SeenRun, target: HandoffTarget) -> bool:
    named = Path(run.spec_file).as_posix()
    return (
        run.spec == target.name
        or named == target.spec_file
        or named.endswith("/" + target.spec_file)
    )


def _failed_on_gates(entry: dict[str, Any]) -> str | None:
    if entry.get("outcome") != "rolled-back":
        return None
    refused = {g: v for g, v in (entry.get("gates") or {}).items() if v != "pass"}
    return ", ".join(f"{g} {v}" for g, v in refused.items()) or None


def decide(
    target: HandoffTarget,
    head: Head,
    *,
    head_digest: str,
    digest_of: Callable[[dict[str, Any]], str | None],
    history: list[dict[str, Any]],
    runs: list[SeenRun],
    merges: list[ReceivedMerge],
    now: dt.datetime,
) -> Decision:
    """Pure: what to do about one spec. digest_of gives a record's digest of the spec's
    files (recorded, or read at its commit), None when unknown."""

    def skip(reason: str) -> Decision:
        return Decision(
            spec=target.name, service=target.service, head=head.commit, action="skip", reason=reason
        )

    mine = [e for e in history if e.get("spec") == target.name]
    done = [e for e in mine if e.get("outcome") == "done"]
    if done and digest_of(done[-1]) == head_digest:
        return skip(f"handed off: record {done[-1].get('handoff_id')} runs the head's files")
    tried = [e for e in mine if digest_of(e) == head_digest]
    if tried and (gates := _failed_on_gates(tried[-1])):
        return skip(
            f"the gates turned the head down in handoff {tried[-1].get('handoff_id')} "
            f"({gates}): merge a fix, or run `handoff run` to try again"
        )
    spec_runs = [r for r in runs if _same_spec(r, target)]
    active = [r for r in spec_runs if r.state in ACTIVE_STATES]
    if active:
        return skip(f"run {active[0].id} of the spec is {active[0].state.lower()}")
    ran = {str(r.trigger.get("delivery_id")) for r in spec_runs}
    waiting = [
        m
        for m in merges
        if m.merge.spec == target.name
        and m.merge.merge_commit == head.commit
        and m.merge.delivery_id not in ran
        and (now - m.occurred).total_seconds() < EVENT_WAIT_S
    ]
    if waiting:
        return skip(
            f"merge event {waiting[-1].id} (delivery {waiting[-1].merge.delivery_id}) for the "
            "head waits for its run"
        )
    attempts = [
        r
        for r in spec_runs
        if r.trigger.get("source") == SOURCE and r.trigger.get("merge_commit") == head.commit
    ]
    if len(attempts) >= MAX_ATTEMPTS:
        return skip(
            f"{len(attempts)} reconciler runs of the head ended without handing it off (last: "
            f"{attempts[0].id}, {attempts[0].state.lower()}): see them, then `handoff run`"
        )
    return Decision(
        spec=target.name,
        service=target.service,
        head=head.commit,
        action="start",
        reason="the head was never handed off, and no run of it is active or queued",
        delivery_id=f"{SOURCE}-{head.commit[:12]}-{len(attempts) + 1}",
    )


def read_head(root: Path, *, branch: str, repository: str | None) -> Head:
    commit = git(root, "rev-parse", "--verify", "HEAD^{commit}")
    when = git(root, "show", "-s", "--format=%cI", "HEAD")
    if commit is None or when is None:
        raise ReconcileError(
            f"{root} is not a git work tree with a commit checked out: the reconciler "
            "compares a branch head's specs with the Services' history; run it in a clone"
        )
    origin = git(root, "remote", "get-url", "origin")
    if origin is not None:  # a clone: its HEAD must be the branch's head as origin has it
        fetched = git(root, "fetch", "--quiet", "origin", branch)
        remote = (
            git(root, "rev-parse", "--verify", "FETCH_HEAD^{commit}")
            if fetched is not None
            else None
        )
        if remote != commit:
            raise ReconcileError(
                f"{root} has {commit} checked out, but {branch} of {origin} is at "
                f"{remote or 'an unknown commit (the fetch failed)'}: the reconciler hands off "
                f"a branch's head, never an older commit; `git pull` the clone (or run "
                "prefect.yaml's reconcile deployment, which clones afresh), then run it again"
            )
    return Head(
        commit=commit,
        committed_at=dt.datetime.fromisoformat(when),
        repository=repository or origin or str(root),
        branch=branch,
    )


class ReconcileError(RuntimeError):
    """The reconciler cannot see what it compares."""


def read_runs(api_url: str) -> list[SeenRun]:
    """The newest handoff flow runs Prefect holds, with their parameters."""
    from prefect import get_client
    from prefect.client.schemas import filters
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_filter=filters.FlowFilter(name=filters.FlowFilterName(any_=[HANDOFF_FLOW])),
            sort=FlowRunSort.EXPECTED_START_TIME_DESC,
            limit=RUN_LIMIT,
        )
    return [
        SeenRun(
            id=str(r.id),
            state=r.state.type.value if r.state else "UNKNOWN",
            spec_file=str(r.parameters.get("spec_file") or ""),
            spec=next(
                (t.removeprefix("handoff:") for t in r.tags if t.startswith("handoff:")), None
            ),
            trigger=r.parameters.get("trigger") or {},
        )
        for r in runs
    ]


def reconcile(
    *,
    specs: Path | None = None,
    kubeconfig: str | None = None,
    api_url: str,
    branch: str = "main",
    repository: str | None = None,
    dry_run: bool = False,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
) -> list[Decision]:
    """One pass over every spec of the checkout holding `specs` (its HEAD is the branch
    head: the deployment clones the branch afresh for each pass)."""
    specs = (specs or default_specs_dir()).resolve()
    root = find_repo_root(specs)
    head = read_head(root, branch=branch, repository=repository)
    index = index_specs(specs, root)
    runs = read_runs(api_url)
    at_commit: dict[str, Callable[[str], bytes | None] | None] = {}

    def digest_of(target: HandoffTarget) -> Callable[[dict[str, Any]], str | None]:
        def digest(entry: dict[str, Any]) -> str | None:
            source = entry.get("source") or {}
            if source.get("digest") and sorted(source.get("files") or []) == sorted(target.paths):
                return str(source["digest"])
            commit = source.get("commit") or (entry.get("trigger") or {}).get("merge_commit")
            if not commit:
                return None
            if commit not in at_commit:
                at_commit[commit] = read_commit(root, commit)
            reader = at_commit[commit]
            return files_digest(target.paths, reader) if reader else None

        return digest

    decisions = [
        Decision(spec="-", service="-", head=head.commit, action="skip", reason=error)
        for error in index.errors
    ]
    wait_persisted(api_url)  # once: every merge event received before now is readable
    kube = connect(kubeconfig)
    try:
        for target in index.targets:
            where = service_key(target.namespace, target.service)
            try:
                service = read.read_service(kube, target.namespace, target.service)
                history = history_entries(service.annotations, where=f"Service {where}")
            except KubeError as exc:
                decisions.append(
                    Decision(
                        spec=target.name,
                        service=target.service,
                        head=head.commit,
                        action="skip",
                        reason=f"Service {where} unreadable: {exc}",
                    )
                )
                continue
            merges = read_merge_events(api_url, namespace=target.namespace, service=target.service)
            decision = decide(
                target,
                head,
                head_digest=files_digest(target.paths, read_worktree(root)),
                digest_of=digest_of(target),
                history=history,
                runs=runs,
                merges=merges,
                now=now(),
            )
            if decision.action == "start" and not dry_run:
                _emit(api_url, target, head, decision, merges)
                decision.started = True
            decisions.append(decision)
    finally:
        kube.close()
    return decisions


def _emit(
    api_url: str,
    target: HandoffTarget,
    head: Head,
    decision: Decision,
    merges: list[ReceivedMerge],
) -> None:
    assert decision.delivery_id is not None
    merge = MergeEvent(
        spec=target.name,
        spec_file=target.spec_file,
        namespace=target.namespace,
        service=target.service,
        delivery_id=decision.delivery_id,
        merge_commit=head.commit,
        # The branch's head is its newest state: ordered after every merge already known
        # for the Service (flows/newest.py), whenever its commit was made.
        merged_at=max([head.committed_at, *(m.order()[0] for m in merges)]),
        repository=head.repository,
        branch=head.branch,
        source=SOURCE,
        kind="reconcile",
        changed=sorted(target.paths),
    )
    event = build_event(merge, occurred=dt.datetime.now(dt.UTC), key=signing_key())
    emit_events(api_url, [event])


def api_url() -> str:
    from prefect.settings import get_current_settings

    url = (get_current_settings().api.url or "").rstrip("/")
    if not url:
        raise ReconcileError(
            "the reconciler reads handoff runs and merge events from Prefect: set PREFECT_API_URL"
        )
    return url


@flow(name="handoff-reconcile", log_prints=True)
def reconcile_flow(branch: str = "main", repository: str | None = None) -> list[Decision]:
    """The scheduled pass (prefect.yaml's `reconcile`), in a fresh clone of the branch."""
    decisions = reconcile(api_url=api_url(), branch=branch, repository=repository)
    log = get_run_logger()
    for d in decisions:
        log.info("%s %s (%s): %s", d.action, d.spec, d.head[:12], d.reason)
    return decisions
