"""Payload reading: only merges into the watched branch become a Merge, with every path
the pushed commits touched; other deliveries are named as not merges, and a body that
is not the promised shape is an error."""

from __future__ import annotations

import pytest

from flows.webhook.payload import (
    ZERO_SHA,
    Merge,
    NotAMerge,
    PayloadError,
    delivery_of,
    forge_of,
    parse_merge,
)
from tests.webhook.payloads import push_body


def _commit(sha: str, **files: list[str]) -> dict[str, object]:
    return {"id": sha, "timestamp": "2026-11-29T10:00:00Z", **files}


def test_a_push_collects_the_paths_of_every_commit() -> None:
    body = push_body([], after="2" * 40)
    body["commits"] = [
        _commit("1" * 40, added=["a.yaml"], modified=["b.yaml"]),
        _commit("2" * 40, removed=["c.json"]),
    ]
    body["head_commit"] = body["commits"][-1]
    merge = parse_merge("forgejo", "push", body, branch=None)
    assert isinstance(merge, Merge)
    assert merge.changed == {"a.yaml", "b.yaml", "c.json"}
    assert merge.merge_commit == "2" * 40
    assert merge.merged_at is not None and merge.merged_at.year == 2026
    assert (merge.repository, merge.branch, merge.kind) == (
        "riotpiao-poimen/models",
        "main",
        "push",
    )


@pytest.mark.parametrize(
    ("body", "branch", "reason"),
    [
        (push_body([], ref="refs/heads/dev"), None, "not to refs/heads/main"),
        (push_body([]), "release", "not to refs/heads/release"),
        (push_body([], after=ZERO_SHA), None, "deleted"),
        (push_body([], ref="refs/tags/v1"), None, "refs/tags/v1"),
    ],
)
def test_pushes_that_are_not_merges_into_the_branch(
    body: dict[str, object], branch: str | None, reason: str
) -> None:
    outcome = parse_merge("gitea", "push", body, branch=branch)
    assert isinstance(outcome, NotAMerge)
    assert reason in outcome.reason


def _pull_request(action: str, merged: bool, base: str = "main") -> dict[str, object]:
    return {
        "action": action,
        "pull_request": {
            "merged": merged,
            "merge_commit_sha": "d" * 40 if merged else None,
            "merged_at": "2026-11-29T11:00:00Z" if merged else None,
            "base": {"ref": base, "sha": "e" * 40},
        },
        "repository": {"full_name": "o/r", "clone_url": "https://forge.invalid/o/r.git"},
    }


def test_a_merged_pull_request_names_its_merge_but_not_its_files() -> None:
    merge = parse_merge("github", "pull_request", _pull_request("closed", True), branch=None)
    assert isinstance(merge, Merge)
    assert (merge.merge_commit, merge.base_commit, merge.changed) == ("d" * 40, "e" * 40, None)


@pytest.mark.parametrize(
    "body",
    [
        _pull_request("closed", False),
        _pull_request("opened", False),
        _pull_request("closed", True, base="dev"),
    ],
)
def test_pull_requests_that_are_not_merges(body: dict[str, object]) -> None:
    assert isinstance(parse_merge("forgejo", "pull_request", body, branch=None), NotAMerge)


@pytest.mark.parametrize(
    ("event", "body"),
    [("push", {"ref": "refs/heads/main"}), ("push", []), ("pull_request", {"action": 1})],
)
def test_a_body_not_of_the_promised_shape_is_an_error(event: str, body: object) -> None:
    with pytest.raises(PayloadError, match=f"{event} payload from forgejo is malformed"):
        parse_merge("forgejo", event, body, branch=None)


def test_forge_and_delivery_headers() -> None:
    forgejo = {"x-forgejo-event": "Push", "x-gitea-event": "push", "x-gitea-delivery": "d1"}
    assert forge_of(forgejo) == ("forgejo", "push")
    assert forge_of({"x-github-event": "push"}) == ("github", "push")
    assert forge_of({"content-type": "application/json"}) is None
    assert delivery_of(forgejo) == "d1"
    assert delivery_of({"x-github-delivery": " "}) is None
