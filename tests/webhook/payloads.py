"""Forge deliveries for the relay tests: Forgejo/GitHub push and pull_request bodies,
signed as each forge signs them."""

from __future__ import annotations

import json
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
        "before": "b" * 40,
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
