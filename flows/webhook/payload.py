"""Forge payloads → one typed Merge (or the reason the delivery is not a merge).

Forgejo, Gitea and GitHub share the shapes used here: a push lists its commits
with `added`/`removed`/`modified` paths; a pull_request event with action
`closed` and `merged: true` names the merge commit but not the files (those come
from a git mirror, see mirror.py). Only merges into the watched branch count;
anything else (other events, other branches, branch deletions) is ignored.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

ZERO_SHA = "0" * 40
# event header (lower case) → forge name; Forgejo also sends X-Gitea-Event, so it comes first
EVENT_HEADERS = {"x-forgejo-event": "forgejo", "x-gitea-event": "gitea", "x-github-event": "github"}
DELIVERY_HEADERS = ("x-forgejo-delivery", "x-gitea-delivery", "x-github-delivery")


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Commit(_Loose):
    id: str
    timestamp: dt.datetime | None = None
    added: list[str] = []
    removed: list[str] = []
    modified: list[str] = []


class _Repository(_Loose):
    full_name: str
    clone_url: str | None = None
    default_branch: str | None = None


class _Push(_Loose):
    ref: str
    before: str | None = None
    after: str
    commits: list[_Commit] = []
    head_commit: _Commit | None = None
    repository: _Repository


class _Branch(_Loose):
    ref: str
    sha: str | None = None


class _PullRequest(_Loose):
    merged: bool = False
    merge_commit_sha: str | None = None
    merged_at: dt.datetime | None = None
    base: _Branch


class _PullRequestEvent(_Loose):
    action: str
    pull_request: _PullRequest
    repository: _Repository


class Merge(BaseModel):
    """A merge into the watched branch, as the relay needs it."""

    model_config = ConfigDict(frozen=True)

    forge: str
    kind: Literal["push", "pull_request"]
    repository: str
    clone_url: str | None
    branch: str
    merge_commit: str
    merged_at: dt.datetime | None
    # None: the payload does not list the files (a merged pull request)
    changed: frozenset[str] | None
    # the base branch's head the pull request was based on (pull_request only)
    base_commit: str | None = None


class NotAMerge(BaseModel):
    """A well-formed delivery the relay has nothing to do with, and why."""

    reason: str


class PayloadError(ValueError):
    """The body is JSON but not the shape the named event promises."""


def forge_of(headers: Mapping[str, str]) -> tuple[str, str] | None:
    """(forge, event name) from the event headers, or None when there are none."""
    for header, forge in EVENT_HEADERS.items():
        if header in headers:
            return forge, headers[header].strip().lower()
    return None


def delivery_of(headers: Mapping[str, str]) -> str | None:
    for header in DELIVERY_HEADERS:
        value = headers.get(header, "").strip()
        if value:
            return value
    return None


def parse_merge(forge: str, event: str, body: Any, *, branch: str | None) -> Merge | NotAMerge:
    """Read a push or pull_request delivery; branch None means the repository's default."""
    try:
        if event == "push":
            return _from_push(forge, _Push.model_validate(body), branch)
        if event == "pull_request":
            return _from_pull_request(forge, _PullRequestEvent.model_validate(body), branch)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
        raise PayloadError(f"{event} payload from {forge} is malformed: {where}") from None
    return NotAMerge(reason=f"{event} events are not merges; send push or pull_request")


def _watched(repo: _Repository, branch: str | None) -> str:
    return branch or repo.default_branch or "main"


def _from_push(forge: str, push: _Push, branch: str | None) -> Merge | NotAMerge:
    watched = _watched(push.repository, branch)
    if push.ref != f"refs/heads/{watched}":
        return NotAMerge(reason=f"push to {push.ref}, not to refs/heads/{watched}")
    if push.after == ZERO_SHA:
        return NotAMerge(reason=f"{push.ref} was deleted")
    commits = [*push.commits, *([push.head_commit] if push.head_commit else [])]
    changed = {path for c in commits for path in (*c.added, *c.removed, *c.modified)}
    head = next((c for c in reversed(commits) if c.id == push.after), None)
    return Merge(
        forge=forge,
        kind="push",
        repository=push.repository.full_name,
        clone_url=push.repository.clone_url,
        branch=watched,
        merge_commit=push.after,
        merged_at=head.timestamp if head else None,
        changed=frozenset(changed),
    )


def _from_pull_request(
    forge: str, event: _PullRequestEvent, branch: str | None
) -> Merge | NotAMerge:
    pr, watched = event.pull_request, _watched(event.repository, branch)
    if event.action != "closed" or not pr.merged or not pr.merge_commit_sha:
        return NotAMerge(reason=f"pull_request {event.action}, not merged")
    if pr.base.ref != watched:
        return NotAMerge(reason=f"pull request merged into {pr.base.ref}, not {watched}")
    return Merge(
        forge=forge,
        kind="pull_request",
        repository=event.repository.full_name,
        clone_url=event.repository.clone_url,
        branch=watched,
        merge_commit=pr.merge_commit_sha,
        merged_at=pr.merged_at,
        changed=None,
        base_commit=pr.base.sha,
    )
