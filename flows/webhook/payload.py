"""Forge payloads → one typed Merge (or the reason the delivery is not a merge).

Forgejo, Gitea and GitHub share the shapes used here: a push lists its commits
with `added`/`removed`/`modified` paths; a pull_request event with action
`closed` and `merged: true` names the merge commit but not the files (those come
from a git mirror, see mirror.py). Only merges into the watched branch count;
anything else (other events, other branches, branch deletions) is ignored.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints, ValidationError

ZERO_SHA = "0" * 40
# event header (lower case) → forge name; Forgejo also sends X-Gitea-Event, so it comes first
EVENT_HEADERS = {"x-forgejo-event": "forgejo", "x-gitea-event": "gitea", "x-github-event": "github"}
DELIVERY_HEADERS = ("x-forgejo-delivery", "x-gitea-delivery", "x-github-delivery")
# Longer than any forge sends (GitHub: 255-byte branch names, 39 + 100 for owner/name):
# a longer value is refused rather than carried into paths, commands and logs.
MAX_BRANCH_CHARS = 255
MAX_REF_CHARS = 300
MAX_NAME_CHARS = 256
MAX_PATH_CHARS = 4096
MAX_URL_CHARS = 2048
MAX_DELIVERY_CHARS = 128
_DELIVERY = re.compile(rf"^[\x21-\x7e]{{1,{MAX_DELIVERY_CHARS}}}$")
_EVENT = re.compile(r"^[a-z_]{1,64}$")
_BRANCH_CHARS = re.compile(r"^[A-Za-z0-9._/+-]+$")


def _branch_name(name: str) -> str:
    """A branch name git accepts and that cannot change the meaning of a refspec."""
    if (
        not _BRANCH_CHARS.match(name)
        or name.startswith(("-", "/", "."))
        or name.endswith(("/", ".", ".lock"))
        or ".." in name
        or "//" in name
    ):
        raise ValueError(
            "not a branch name the relay accepts (letters, digits and ._/+- only; no leading "
            "- / or ., no .., //, trailing / . or .lock)"
        )
    return name


Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{40}([0-9a-fA-F]{24})?$")]
Ref = Annotated[str, StringConstraints(max_length=MAX_REF_CHARS)]
Branch = Annotated[
    str, StringConstraints(max_length=MAX_BRANCH_CHARS), AfterValidator(_branch_name)
]
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]
RepoPath = Annotated[str, StringConstraints(max_length=MAX_PATH_CHARS)]
Url = Annotated[str, StringConstraints(max_length=MAX_URL_CHARS)]


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Commit(_Loose):
    id: Sha
    timestamp: dt.datetime | None = None
    added: list[RepoPath] = []
    removed: list[RepoPath] = []
    modified: list[RepoPath] = []


class _Repository(_Loose):
    full_name: Name
    clone_url: Url | None = None
    default_branch: Branch | None = None


class _Push(_Loose):
    ref: Ref
    before: Sha | None = None
    after: Sha
    commits: list[_Commit] = []
    head_commit: _Commit | None = None
    repository: _Repository


class _Branch(_Loose):
    ref: Annotated[str, StringConstraints(max_length=MAX_BRANCH_CHARS)]
    sha: Sha | None = None


class _PullRequest(_Loose):
    merged: bool = False
    merge_commit_sha: Sha | None = None
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
    # the branch's head before a push (push only; None or zeros: the branch is new)
    before: str | None = None


class NotAMerge(BaseModel):
    """A well-formed delivery the relay has nothing to do with, and why."""

    reason: str


class PayloadError(ValueError):
    """The body is JSON but not the shape the named event promises."""


class HeaderError(ValueError):
    """The event or delivery headers are missing, repeated or not what a forge sends."""


def repeated(headers: Iterable[tuple[str, str]], names: Iterable[str]) -> list[str]:
    """Which of names (lower case) occur more than once among the (name, value) pairs."""
    wanted, seen, twice = set(names), set(), []
    for name, _ in headers:
        key = name.lower()
        if key in wanted:
            if key in seen and key not in twice:
                twice.append(key)
            seen.add(key)
    return twice


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


def read_headers(headers: Mapping[str, str]) -> tuple[str, str, str]:
    """(forge, event, delivery id) from a delivery's headers; HeaderError says what is wrong."""
    twice = repeated(headers.items(), [*EVENT_HEADERS, *DELIVERY_HEADERS])
    if twice:
        raise HeaderError(f"{', '.join(twice)} given more than once: send each header once")
    forge, delivery = forge_of(headers), delivery_of(headers)
    if forge is None or delivery is None:
        raise HeaderError("missing X-Forgejo/X-Gitea/X-GitHub Event or Delivery")
    if not _EVENT.match(forge[1]):
        raise HeaderError(f"the {forge[0]} event header is not an event name (a-z and _)")
    if not _DELIVERY.match(delivery):
        raise HeaderError(
            f"the delivery id is not 1–{MAX_DELIVERY_CHARS} printable ASCII characters "
            "without spaces"
        )
    return (*forge, delivery)


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
    merged_at = head.timestamp if head else None
    return _merge(
        forge,
        push.repository,
        watched,
        "push",
        push.after,
        merged_at,
        changed=frozenset(changed),
        before=push.before,
    )


def _from_pull_request(
    forge: str, event: _PullRequestEvent, branch: str | None
) -> Merge | NotAMerge:
    pr, watched = event.pull_request, _watched(event.repository, branch)
    if event.action != "closed" or not pr.merged or not pr.merge_commit_sha:
        return NotAMerge(reason=f"pull_request {event.action}, not merged")
    if pr.base.ref != watched:
        return NotAMerge(reason=f"pull request merged into {pr.base.ref}, not {watched}")
    commit, merged_at = pr.merge_commit_sha, pr.merged_at
    return _merge(
        forge, event.repository, watched, "pull_request", commit, merged_at, base_commit=pr.base.sha
    )


def _merge(
    forge: str,
    repo: _Repository,
    branch: str,
    kind: Literal["push", "pull_request"],
    commit: str,
    merged_at: dt.datetime | None,
    *,
    changed: frozenset[str] | None = None,
    base_commit: str | None = None,
    before: str | None = None,
) -> Merge:
    """A merge of `commit` into `branch` of `repo`, as `forge` reported it."""
    return Merge(
        forge=forge,
        kind=kind,
        repository=repo.full_name,
        branch=branch,
        merge_commit=commit,
        clone_url=repo.clone_url,
        merged_at=merged_at,
        changed=changed,
        base_commit=base_commit,
        before=before,
    )
