"""Forge deliveries for the relay tests: Forgejo/GitHub push and pull_request bodies,
signed as each forge signs them."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx

from flows.webhook.signature import sign


def push_body(
    changed: list[str],
    *,
    after: str = "a" * 40,
    ref: str = "refs/heads/main",
    clone_url: str | None = None,
    before: str = "b" * 40,
) -> dict[str, Any]:
    commit = {
        "id": after,
        "message": "Merge a change",
        "timestamp": "2026-11-29T10:00:00+00:00",
        "added": [],
        "removed": [],
        "modified": changed,
    }
    return {
        "ref": ref,
        "before": before,
        "after": after,
        "commits": [commit],
        "head_commit": commit,
        "repository": {
            "full_name": "riotpiao-poimen/models",
            "default_branch": "main",
            **({"clone_url": clone_url} if clone_url else {}),
        },
    }


def pull_request_body(
    merge: str, *, clone_url: str | None, base: str = "main", base_sha: str | None = None
) -> dict[str, Any]:
    """A merged pull request into base (its files are not listed: the relay fetches them)."""
    return {
        "action": "closed",
        "pull_request": {
            "merged": True,
            "merge_commit_sha": merge,
            "merged_at": "2026-11-29T10:00:00Z",
            "base": {"ref": base, **({"sha": base_sha} if base_sha else {})},
        },
        "repository": {
            "full_name": "riotpiao-poimen/models",
            **({"clone_url": clone_url} if clone_url else {}),
        },
    }


def forgejo_headers(body: bytes, secret: str, *, event: str = "push") -> dict[str, str]:
    digest = sign(secret.encode(), body)
    return {
        "Content-Type": "application/json",
        "X-Forgejo-Event": event,
        "X-Gitea-Event": event,
        "X-Forgejo-Delivery": str(uuid.uuid4()),
        "X-Forgejo-Signature": digest,
        "X-Gitea-Signature": digest,
    }


def github_headers(body: bytes, secret: str, *, event: str = "push") -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": "sha256=" + sign(secret.encode(), body),
    }


def deliver(url: str, payload: Any, secret: str, **kw: Any) -> httpx.Response:
    """POST a Forgejo-signed JSON delivery (headers may be overridden)."""
    body = json.dumps(payload).encode()
    headers = {**forgejo_headers(body, secret), **kw.pop("headers", {})}
    return httpx.post(url, content=body, headers=headers, timeout=30, **kw)


def outcome_of(hook_url: str, response: httpx.Response, *, timeout_s: float = 60.0) -> Any:
    """An answer's JSON; for a delivery the relay accepted (202), its record once final
    (GET /deliveries/<id> on the relay, polled)."""
    if response.status_code != 202:
        return response.json()
    return final_record(hook_url, response.json()["delivery"], timeout_s=timeout_s)


def record_of(hook_url: str, delivery: str) -> Any:
    """The relay's record of a delivery (GET /deliveries/<id>)."""
    url = hook_url.replace("/hooks/git", f"/deliveries/{delivery}")
    response = httpx.get(url, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def final_record(hook_url: str, delivery: str, *, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        record = record_of(hook_url, delivery)
        if record["state"] == "final":
            return record
        assert time.monotonic() < deadline, f"delivery {delivery} not final: {record}"
        time.sleep(0.05)


def settled(url: str, payload: Any, secret: str, **kw: Any) -> Any:
    """deliver(), then its final record (or the answer's JSON when it was not accepted)."""
    return outcome_of(url, deliver(url, payload, secret, **kw))
