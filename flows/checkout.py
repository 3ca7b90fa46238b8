"""The process deployment's pull step: clone the repository at the commit the run's
trigger names (a merge's run hands off its merge, not whatever main holds by then).

Prefect runs pull steps in the flow run's process before the flow is imported, and
gives them no parameters: the step reads its own flow run's `trigger.merge_commit`
from the API. A run without one (started by hand or by the schedule) gets the branch's
head. A commit the repository does not hold leaves the branch's head checked out, said
in the log: the flow then refuses to run it (flows/source_tree.py), naming both commits.
A clone of the project itself becomes the code the run imports (flows/running_code.py).
"""

from __future__ import annotations

import logging
import os
import subprocess
import uuid
from pathlib import Path

from flows.running_code import ENTRY, load_from
from flows.source_tree import git
from flows.webhook.event_signature import check_trigger

_CLONE_TIMEOUT_S = 600.0
log = logging.getLogger("prefect.handoff.checkout")


def run_commit() -> str | None:
    """The merge commit the running flow run's trigger names, if any."""
    run_id = os.environ.get("PREFECT__FLOW_RUN_ID")
    if not run_id:
        return None
    from prefect import get_client

    with get_client(sync_client=True) as client:
        parameters = client.read_flow_run(uuid.UUID(run_id)).parameters
    trigger = parameters.get("trigger") or {}
    if not isinstance(trigger, dict):
        return None
    # Before anything is cloned: the commit's own code must never run unless the relay
    # sent it (this step runs from the worker's environment).
    check_trigger(str(parameters.get("spec_file") or ""), trigger)
    commit = trigger.get("merge_commit")
    return str(commit) if commit else None


def clone_at(repository: str, *, branch: str, commit: str | None, into: Path) -> str:
    """Clone repository into `into` with commit (else branch) checked out; the commit
    checked out. Raises CalledProcessError when even the branch cannot be cloned."""
    subprocess.run(
        [
            "git",
            "clone",
            "--quiet",
            "--no-checkout",
            "--branch",
            branch,
            "--",
            repository,
            str(into),
        ],
        check=True,
        capture_output=True,
        timeout=_CLONE_TIMEOUT_S,
    )
    if commit is not None and git(into, "cat-file", "-e", f"{commit}^{{commit}}") is None:
        # Not among the branch's history yet (a forge that has not published it, or a
        # commit of another branch): ask for it by id once.
        git(into, "fetch", "--quiet", "origin", commit)
    target = commit if commit is not None else f"origin/{branch}"
    if git(into, "checkout", "--quiet", "--detach", target) is None:
        log.error(
            "commit %s is not in %s: %s's head is checked out instead, and the handoff "
            "will refuse to run it",
            commit,
            repository,
            branch,
        )
        git(into, "checkout", "--quiet", "--detach", f"origin/{branch}")
    ran = git(into, "rev-parse", "HEAD") or "unknown"
    log.info("checked out %s of %s (wanted %s)", ran, repository, commit or f"{branch}'s head")
    return ran


def clone_run_commit(
    repository: str, branch: str = "main", parent: str | None = None
) -> dict[str, str]:
    """prefect.yaml's pull step: `directory` is where the flow run then runs. The clone
    goes under `parent`, else the working directory (the flow image's is read-only)."""
    commit = run_commit()
    base = Path(parent) if parent else Path.cwd()
    into = base / f"handoff-{(commit or branch)[:12]}-{uuid.uuid4().hex[:6]}"
    clone_at(repository, branch=branch, commit=commit, into=into)
    if (into / ENTRY).is_file():
        # This step was imported from the runner's copy of the project: without this, the
        # clone's entry point would import every other module from that copy.
        load_from(into)
    return {"directory": str(into)}
