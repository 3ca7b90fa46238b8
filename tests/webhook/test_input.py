"""Bad input is a 4xx with a clear message and changes nothing: JSON of any depth, lone
surrogates, fields longer than any forge sends, ids that are not ids, and a signature
or delivery header given twice."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from flows.webhook.signature import sign
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import forgejo_headers, pull_request_body, push_body
from tests.webhook.servers import PrefectServer
from tests.webhook.specrepo import SpecRepo
from tests.webhook.test_relay import ALPHA_MANIFEST, merges


def post_signed(relay: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        relay, content=body, headers={**forgejo_headers(body, SECRET), **headers}, timeout=30
    )


def with_field(path: str, value: Any, body: dict[str, Any] | None = None) -> bytes:
    payload = body or push_body([ALPHA_MANIFEST])
    *parents, last = path.split(".")
    node = payload
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[last] = value
    return json.dumps(payload).encode()


@pytest.mark.parametrize("depth", [1_000, 10_000])
def test_json_of_any_depth_is_400(relay: str, depth: int) -> None:
    for body in ((b"[" * depth) + (b"]" * depth), b'{"a":' * depth + b"1" + b"}" * depth):
        response = post_signed(relay, body)
        assert response.status_code == 400, response.text
        assert response.json()["outcome"] == "malformed"


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        ("ref", "refs/heads/\ud800", "surrogate"),
        ("repository.full_name", "riotpiao-poimen/\udfff", "surrogate"),
        ("ref", "refs/heads/" + "m" * 10_000, "ref"),
        ("repository.full_name", "o/" + "r" * 300, "full_name"),
        ("repository.clone_url", "https://forge.example/" + "r" * 5_000, "clone_url"),
        ("after", "not a sha", "after"),
        ("after", "a" * 41, "after"),
        ("commits.0.modified", ["x" * 5_000], "modified"),
        ("repository.default_branch", "main:refs/heads/x", "default_branch"),
        ("repository.default_branch", "-main", "default_branch"),
    ],
)
def test_fields_no_forge_sends_are_400_naming_the_field(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo, path: str, value: Any, named: str
) -> None:
    response = post_signed(relay, with_field(path, value))
    assert response.status_code == 400, response.text
    assert named in response.json()["detail"], response.text
    assert len(response.text) < 2_000, "the answer repeats what it refuses"
    assert merges(prefect, spec_repo, "alpha") == []


def test_a_pull_request_with_a_bad_commit_id_is_400(relay: str) -> None:
    body = with_field(
        "pull_request.merge_commit_sha", "--all", pull_request_body("a" * 40, clone_url=None)
    )
    response = post_signed(relay, body, **{"X-Forgejo-Event": "pull_request"})
    assert response.status_code == 400, response.text
    assert "merge_commit_sha" in response.json()["detail"]


@pytest.mark.parametrize("delivery", ["d" * 129, "two words", "a\tb", "é"])
def test_a_delivery_id_that_is_not_an_id_is_400(relay: str, delivery: str) -> None:
    body = json.dumps(push_body([ALPHA_MANIFEST])).encode()
    headers = {**forgejo_headers(body, SECRET), "X-Forgejo-Delivery": delivery}
    response = httpx.post(
        relay, content=body, headers={k: v.encode("latin-1") for k, v in headers.items()}
    )
    assert response.status_code == 400, response.text
    assert "delivery" in response.json()["detail"].lower()


def test_duplicate_signature_and_delivery_headers_are_refused(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    body = json.dumps(push_body([ALPHA_MANIFEST])).encode()
    good = sign(SECRET.encode(), body)
    base = [(k, v) for k, v in forgejo_headers(body, SECRET).items() if k != "X-Gitea-Signature"]
    one_bad = [*base, ("X-Forgejo-Signature", "0" * 64)]
    both_good = [*base, ("X-Forgejo-Signature", good)]
    github = [*base, ("X-Hub-Signature-256", f"sha256={good}"), ("X-Hub-Signature-256", "x")]
    for headers in (one_bad, both_good, github):
        response = httpx.post(relay, content=body, headers=headers)
        assert response.status_code == 401, response.text
        assert "more than once" in response.json()["detail"], response.text
    twice = [*base, ("X-Forgejo-Delivery", "another-id")]
    response = httpx.post(relay, content=body, headers=twice)
    assert response.status_code == 400, response.text
    assert "more than once" in response.json()["detail"], response.text
    assert merges(prefect, spec_repo, "alpha") == []
