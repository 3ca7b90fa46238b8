"""The troubleshooting page, rendered at build time from flows/errors.py.

The tree drawn in that module's docstring (which tests/flows/test_error_tree.py keeps equal
to the classes) gives each error's place, module and one-line meaning; each class's own
docstring follows, then what to do. Advice is kept here per class where a class needs more
than its branch's; a name here that the tree lacks fails the strict build.
"""

from __future__ import annotations

import importlib
import logging
import re
from typing import Any

MARKER = "<!-- error-reference -->"
log = logging.getLogger("mkdocs.plugins.troubleshooting")

# "    │   ├── Conflict      (kube.client) 409: ..." -> name, module, meaning
_LINE = re.compile(r"^[ │├└─]*(?P<name>[A-Z]\w+)\s*(?:\((?P<module>[\w.]+)\))?\s*(?P<meaning>.*)$")

BRANCH = {
    "TransientError": "It may clear by itself. Where the flow retries it (a request to the "
    "API server or the registry, a 409, the Lease's renewal) it has already done so for "
    "`HANDOFF_RETRY_S`; anywhere else it stops the run. Once the cause is gone, run the "
    "same handoff again: it resumes from its ledger on the Service.",
    "PermanentError": "Running the handoff again unchanged gives the same answer: fix what "
    "the message names (the spec, the cluster, the image, the permissions), then run it "
    "again. After its first write the run has rolled back (`handoff history RUN_ID` shows "
    "the cause); a run stopped mid-rollback is finished by `handoff rollback SPEC`.",
}

ADVICE = {
    "NewestUnknown": "Make the Prefect API reachable (and its credentials accepted) for "
    "the run, then run it again; it never guesses whether its merge is still the newest.",
    "WaitTimedOut": "The message names what was waited for and what was seen; look at "
    "those pods or ReplicaSets (`kubectl describe`, events) and run the handoff again.",
    "GateFailed": "Read the report `handoff-<service>` (its gate sections, and the "
    "`latency-`/`parity-` pictures). A candidate that serves wrong or slow answers needs "
    "a new build; a tolerance or margin is changed only with evidence (see [Gates](gates.md)).",
    "ApprovalRejected": "The approver's reason is in the history entry; change what they "
    "asked for and run again.",
    "ApprovalTimedOut": "Nobody answered in time; run again and answer the pause (UI or "
    "`handoff approve RUN_ID`).",
    "ImageNotReady": "CI published no image whose revision holds the spec's fix commits "
    "before `image.timeout_s`: check the build, then run again (`handoff image check`).",
    "ImageMissing": "Check the image reference in the spec (and `HANDOFF_IMAGES`).",
    "SourceUnavailable": "Check `image.source` and that this machine can fetch it.",
    "MissingRevisionLabel": "Build the image with `org.opencontainers.image.revision`.",
    "UnknownCommit": "Check the fix commits in the spec against `image.source`.",
    "FixMissing": "The image was built from a tree without the fix: wait for, or make, "
    "a build that holds it.",
    "Forbidden": "Grant what the message names: `handoff rbac render SPECS` gives the "
    "Role the spec needs (see [Operating on a real cluster](operating.md#trust-boundary)).",
    "SpecError": "Fix the file and field the message names (`handoff plan SPEC` checks it).",
    "SpecRefused": "Name a spec under the specs directory (`manifests/handoffs/` or "
    "`HANDOFF_SPECS_DIR`), not a path or symlink out of it.",
    "NotifyBlockError": "Create the block in Prefect or fix `notify.block` (type-slug/name).",
    "PlanRefused": "Nothing was written. The message gives the numbers (GPUs, what the "
    "Service routes to, a Deployment mid-rollout); change the cluster or the spec.",
    "HandoffInProgress": "Another run holds the Service; wait for it, or, if it was "
    "killed, run again once its Lease has expired.",
    "LeaseLost": "The run stopped writing; run the handoff again to resume it.",
    "RollbackUnfinished": "Run the handoff (or `handoff rollback`) again: it finishes the "
    "rollback, then a new run can go forward.",
    "CandidateChanged": "The candidate manifest changed after its gates: finish the old "
    "handoff with `handoff rollback SPEC`, then run the new one.",
    "RestoreNotReady": "The Service stays on the pods that serve and the ledger stays "
    "`rolling-back`: make the old workload's pods Ready (the message says what to look "
    "at), then run `handoff rollback SPEC` or the handoff again.",
    "SelectorEdited": "A person changed the Service's selector; the handoff left it as "
    "it is. Decide which pods it should select, then run again.",
    "WorkloadReplaced": "A Deployment of the candidate's name is not the one the handoff "
    "made; remove or rename it, then run again.",
    "HistoryUnreadable": "Repair or remove the Service's `handoff.dev/history` "
    "annotation; the flow does not overwrite it.",
    "BaselineError": "Make a ready pod of the live Deployment's current ReplicaSet serve, "
    "and check the spec's `current:` names another workload than the candidate.",
    "CandidateFailed": "The message holds the pods' events and log lines (crash loop, "
    "image pull, Unschedulable, a node NotReady, an admission refusal); fix that.",
    "DowntimeExceeded": "The in-place outage was spent without a swap and rolled back; "
    "look at the step that took longest and raise its budget in the spec if it was right.",
    "SwapFailed": "Look at the Service's EndpointSlices and the candidate's pods.",
    "PersonEdited": "The rollback left the edited object as the person left it; settle "
    "the edit, then run again.",
    "BakeBreached": "The Service is back on the old pods; the report's Bake section says "
    "which SLO was breached.",
    "WrongCommit": "The worker cloned another commit than the merge's; check "
    "`HANDOFF_REPOSITORY` and that the tree is unmodified.",
    "WrongCode": "Nothing was written. Build the flow image from the merge commit and render "
    "the pool with its digest (`handoff work-pool render --image ...`), or `uv sync --frozen` "
    "the process worker's checkout at that commit; check that the deployment's pull step is "
    "`flows.checkout.clone_run_commit`.",
    "SigningKeyError": "Check the key file the message names (`handoff keygen` makes a pair).",
    "UnsignedTrigger": "The event did not come from the relay's key: start the relay with "
    "`--event-key` and the worker with the matching `HANDOFF_EVENT_PUBLIC_KEY_FILE`.",
    "PoolTemplateError": "Give `handoff work-pool render` an image by digest (`REPO@sha256:…`).",
    "ServiceGone": "The Service is never recreated by the flow; the Deployments were put "
    "back. Recreate the Service (as its owner does), then run again.",
}


def _tree() -> tuple[str, list[tuple[str, str, str, str]]]:
    """The drawn tree's text and, per class in its order: (name, parent branch, module,
    meaning)."""
    from flows import errors

    lines = (errors.__doc__ or "").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "HandoffError")
    drawn = []
    for line in lines[start:]:
        if not line.strip():
            break
        drawn.append(line)
    nodes = []
    for line in drawn:
        match = _LINE.match(line.strip())
        if match is None:
            raise ValueError(f"flows/errors.py: unreadable line in the error tree: {line!r}")
        nodes.append((match["name"], match["module"] or "errors", match["meaning"]))
    branch = ""
    rows = []
    for name, module, meaning in nodes:
        branch = name if name in BRANCH else branch
        rows.append((name, branch, module, meaning))
    text = "\n".join(line[len(drawn[0]) - len(drawn[0].lstrip()) :] for line in drawn)
    return text, rows


def reference() -> str:
    text, rows = _tree()
    out = ["```text", text, "```", ""]
    for name in sorted(set(ADVICE) - {row[0] for row in rows}):
        log.warning("troubleshooting advice for %s, which flows/errors.py's tree lacks", name)
    for name, branch, module, meaning in rows:
        cls = getattr(importlib.import_module(f"flows.{module}"), name)
        doc = " ".join((cls.__doc__ or "").split())
        where = f"`flows.{module}.{name}`"
        out += [f"## {name}", "", f"{where}: {meaning}" if meaning else where, ""]
        if doc:
            out += [doc.replace("``", "`"), ""]
        advice = BRANCH.get(name) or ADVICE.get(name) or BRANCH.get(branch)
        if advice:
            out += [f"**What to do.** {advice}", ""]
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, reference())
    return markdown
