"""The relay over real HTTP against a real Prefect server: a signed merge emits exactly
one `handoff.merge` event per affected handoff (id derived from the delivery id), and
every refused, replayed or irrelevant delivery emits nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx

from flows.webhook.app import RelaySettings
from flows.webhook.events import ReceivedMerge, merge_event_id, read_merge_events, wait_persisted
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import (
    deliver,
    forgejo_headers,
    github_headers,
    pull_request_body,
    push_body,
)
from tests.webhook.servers import PrefectServer, running_relay
from tests.webhook.specrepo import SpecRepo, git, merge_and_push, spec_files
from tests.webhook.upstream import git_daemon

ALPHA_MANIFEST = "manifests/llm-serving/alpha.yaml"


def bare_remote(repo: SpecRepo) -> Path:
    """A bare `origin` for the spec repository (no hook: deliveries are posted by hand)."""
    bare = repo.work.parent / "models.git"
    git(repo.work.parent, "init", "-q", "--bare", "-b", "main", str(bare))
    git(repo.work, "remote", "add", "origin", str(bare))
    return bare


def merges(prefect: PrefectServer, repo: SpecRepo, spec: str) -> list[ReceivedMerge]:
    """The merge events Prefect holds for the spec's Service, once persisted."""
    wait_persisted(prefect.api_url)
    return read_merge_events(prefect.api_url, namespace=repo.namespace, service=repo.services[spec])


def test_a_merge_emits_one_event_per_affected_handoff(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    changed = [ALPHA_MANIFEST, "manifests/golden/beta.json", "README.md"]
    response = deliver(relay, push_body(changed, after="c" * 40), SECRET)
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["outcome"] == "emitted"
    assert sorted(reply["handoffs"]) == ["alpha", "beta"]
    for spec in ("alpha", "beta"):
        [event] = merges(prefect, spec_repo, spec)
        assert event.id == merge_event_id(reply["delivery"], spec)
        assert event.merge.spec_file == f"manifests/handoffs/{spec}.yaml"
        assert event.merge.merge_commit == "c" * 40
        assert event.merge.delivery_id == reply["delivery"]
        assert event.merge.source == "forgejo"


def test_a_github_signed_push_is_accepted(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    body = json.dumps(push_body(["manifests/handoffs/alpha.yaml"])).encode()
    response = httpx.post(relay, content=body, headers=github_headers(body, SECRET))
    assert response.json()["handoffs"] == ["alpha"]
    assert [e.merge.source for e in merges(prefect, spec_repo, "alpha")] == ["github"]


def test_bad_signatures_are_refused_and_emit_nothing(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    payload = push_body([ALPHA_MANIFEST])
    body = json.dumps(payload).encode()
    wrong_secret = deliver(relay, payload, "not the secret")
    tampered = httpx.post(
        relay, content=body.replace(b"main", b"mainx"), headers=forgejo_headers(body, SECRET)
    )
    unsigned = deliver(relay, payload, SECRET, headers={"X-Forgejo-Signature": ""})
    headers = forgejo_headers(body, SECRET)
    del headers["X-Forgejo-Signature"], headers["X-Gitea-Signature"]
    missing = httpx.post(relay, content=body, headers=headers)
    # one header right, another wrong: refused
    mixed = deliver(relay, payload, SECRET, headers={"X-Gitea-Signature": "0" * 64})
    for response in (wrong_secret, tampered, unsigned, missing, mixed):
        assert response.status_code == 401, response.text
        assert response.json()["outcome"] == "bad-signature"
    assert merges(prefect, spec_repo, "alpha") == []


def test_malformed_bodies_get_400(relay: str, prefect: PrefectServer, spec_repo: SpecRepo) -> None:
    not_json = b'{"ref": "refs/heads/main", '
    bad_json = httpx.post(relay, content=not_json, headers=forgejo_headers(not_json, SECRET))
    wrong_shape = deliver(relay, {"ref": "refs/heads/main"}, SECRET)
    no_delivery = deliver(
        relay, push_body([ALPHA_MANIFEST]), SECRET, headers={"X-Forgejo-Delivery": ""}
    )
    for response in (bad_json, wrong_shape, no_delivery):
        assert response.status_code == 400, response.text
    assert "not JSON" in bad_json.json()["detail"]
    assert "after" in wrong_shape.json()["detail"]
    assert merges(prefect, spec_repo, "alpha") == []


def test_oversized_bodies_get_413(
    relay: str, settings: RelaySettings, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    payload = push_body([ALPHA_MANIFEST] + ["x" * 100] * (settings.max_body_bytes // 100))
    declared = deliver(relay, payload, SECRET)
    body = json.dumps(payload).encode()

    def chunks() -> Iterator[bytes]:  # no Content-Length: the relay must count
        for start in range(0, len(body), 4096):
            yield body[start : start + 4096]

    streamed = httpx.post(relay, content=chunks(), headers=forgejo_headers(body, SECRET))
    assert declared.status_code == 413
    assert streamed.status_code == 413
    assert merges(prefect, spec_repo, "alpha") == []


def test_a_replayed_delivery_is_dropped(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    body = json.dumps(push_body([ALPHA_MANIFEST])).encode()
    headers = forgejo_headers(body, SECRET)
    first = httpx.post(relay, content=body, headers=headers)
    replay = httpx.post(relay, content=body, headers=headers)
    assert first.json()["outcome"] == "emitted"
    assert replay.status_code == 200
    assert replay.json()["outcome"] == "replayed"
    assert len(merges(prefect, spec_repo, "alpha")) == 1


def test_unrelated_changes_and_other_branches_emit_nothing(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    unrelated = deliver(relay, push_body(["README.md", "flows/handoff.py"]), SECRET)
    branch = deliver(relay, push_body([ALPHA_MANIFEST], ref="refs/heads/feature"), SECRET)
    issue = deliver(relay, {"action": "opened"}, SECRET, headers={"X-Forgejo-Event": "issues"})
    assert unrelated.json()["outcome"] == "no-handoff"
    assert branch.json()["outcome"] == "ignored"
    assert issue.json()["outcome"] == "ignored"
    assert merges(prefect, spec_repo, "alpha") == []


def test_prefect_down_answers_503_and_the_retry_goes_through(
    settings: RelaySettings, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    body = json.dumps(push_body([ALPHA_MANIFEST])).encode()
    headers = forgejo_headers(body, SECRET)
    closed = settings.model_copy(update={"prefect_api_url": "http://127.0.0.1:9/api"})
    with running_relay(closed) as down:
        refused = httpx.post(down, content=body, headers=headers)
    with running_relay(settings) as up:
        retried = httpx.post(up, content=body, headers=headers)
    assert refused.status_code == 503
    assert retried.json()["outcome"] == "emitted"
    assert len(merges(prefect, spec_repo, "alpha")) == 1


def test_a_merged_pull_request_reads_its_files_from_a_mirror(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    bare = bare_remote(spec_repo)
    merge, _ = merge_and_push(spec_repo, {ALPHA_MANIFEST: "kind: Deployment\n"}, "alpha v2")
    with git_daemon(bare.parent) as port:
        pull_request = pull_request_body(merge, clone_url=f"git://127.0.0.1:{port}/{bare.name}")
        merged = deliver(relay, pull_request, SECRET, headers={"X-Forgejo-Event": "pull_request"})
    # the push of the same merge (both webhooks configured): one handoff, not two
    push = deliver(relay, push_body([ALPHA_MANIFEST], after=merge), SECRET)
    assert merged.json()["handoffs"] == ["alpha"], merged.text
    assert push.json()["outcome"] == "no-handoff"
    [event] = merges(prefect, spec_repo, "alpha")
    assert (event.merge.kind, event.merge.merge_commit) == ("pull_request", merge)
    assert event.merge.changed == [ALPHA_MANIFEST]


def test_a_spec_added_by_the_merge_itself_is_read_from_the_merge(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    bare = bare_remote(spec_repo)
    service = f"gamma-{spec_repo.namespace}"
    files = spec_files("gamma", spec_repo.namespace, service)
    merge, _ = merge_and_push(spec_repo, files, "add the gamma handoff")
    git(spec_repo.work, "reset", "-q", "--hard", "HEAD^1")  # the relay's checkout lags behind
    assert not (spec_repo.specs_dir / "gamma.yaml").exists()
    with git_daemon(bare.parent) as port:
        url = f"git://127.0.0.1:{port}/{bare.name}"
        reply = deliver(relay, push_body(sorted(files), after=merge, clone_url=url), SECRET).json()
    assert reply["handoffs"] == ["gamma"], reply
    wait_persisted(prefect.api_url)
    [event] = read_merge_events(prefect.api_url, namespace=spec_repo.namespace, service=service)
    assert (event.merge.spec_file, event.merge.merge_commit) == (
        "manifests/handoffs/gamma.yaml",
        merge,
    )


def test_an_unfetchable_repository_falls_back_to_the_relays_checkout(
    relay: str, spec_repo: SpecRepo
) -> None:
    missing = str(spec_repo.work.parent / "no-such-remote.git")
    reply = deliver(relay, push_body([ALPHA_MANIFEST], clone_url=missing), SECRET).json()
    assert reply["handoffs"] == ["alpha"], reply
