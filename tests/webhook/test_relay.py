"""The relay over real HTTP against a real Prefect server: a signed merge is accepted
(202) and emits exactly one `handoff.merge` event per affected handoff (id derived from
the delivery id), read from the merge as fetched (never the payload's file list); every
refused, replayed, irrelevant or foreign delivery emits nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

from flows.webhook.app import RelaySettings
from flows.webhook.events import ReceivedMerge, merge_event_id, read_merge_events, wait_persisted
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import (
    deliver,
    forgejo_headers,
    github_headers,
    outcome_of,
    pull_request_body,
    push_body,
    settled,
)
from tests.webhook.servers import PrefectServer
from tests.webhook.specrepo import (
    SpecRepo,
    bare_remote,
    git,
    merge_and_push,
    spec_files,
)

__all__ = ["ALPHA_MANIFEST", "bare_remote", "merges", "pushed"]
ALPHA_MANIFEST = "manifests/llm-serving/alpha.yaml"


def pushed(repo: SpecRepo, files: dict[str, str], message: str = "a change") -> dict[str, Any]:
    """Merge files into main of the repository's remote; the push payload a forge sends
    for it (listing only the merge's paths, as forges list them)."""
    bare_remote(repo)
    before = git(repo.work, "rev-parse", "HEAD").strip()
    merge, _ = merge_and_push(repo, files, message)
    return push_body(sorted(files), after=merge, before=before)


def merges(prefect: PrefectServer, repo: SpecRepo, spec: str) -> list[ReceivedMerge]:
    """The merge events Prefect holds for the spec's Service, once persisted."""
    wait_persisted(prefect.api_url)
    return read_merge_events(prefect.api_url, namespace=repo.namespace, service=repo.services[spec])


def test_a_merge_emits_one_event_per_affected_handoff(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    files = {ALPHA_MANIFEST: "kind: Deployment\n", "manifests/golden/beta.json": "{}\n\n"}
    payload = pushed(spec_repo, {**files, "README.md": "# models, v2\n"})
    response = deliver(relay, payload, SECRET)
    assert response.status_code == 202, response.text
    reply = outcome_of(relay, response)
    assert reply["outcome"] == "emitted", reply
    assert sorted(reply["handoffs"]) == ["alpha", "beta"]
    for spec in ("alpha", "beta"):
        [event] = merges(prefect, spec_repo, spec)
        assert event.id == merge_event_id(reply["delivery"], spec)
        assert event.merge.spec_file == f"manifests/handoffs/{spec}.yaml"
        assert event.merge.merge_commit == payload["after"]
        assert event.merge.delivery_id == reply["delivery"]
        assert event.merge.source == "forgejo"


def test_a_github_signed_push_is_accepted(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    payload = pushed(spec_repo, {"manifests/handoffs/alpha.yaml": _spec_edit(spec_repo)})
    body = json.dumps(payload).encode()
    response = httpx.post(relay, content=body, headers=github_headers(body, SECRET))
    assert outcome_of(relay, response)["handoffs"] == ["alpha"]
    assert [e.merge.source for e in merges(prefect, spec_repo, "alpha")] == ["github"]


def _spec_edit(repo: SpecRepo) -> str:
    return (repo.specs_dir / "alpha.yaml").read_text() + "# edited\n"


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
    body = json.dumps(pushed(spec_repo, {ALPHA_MANIFEST: "kind: Deployment\n"})).encode()
    headers = forgejo_headers(body, SECRET)
    first = httpx.post(relay, content=body, headers=headers)
    queued = httpx.post(relay, content=body, headers=headers)  # before or after its outcome
    assert outcome_of(relay, first)["outcome"] == "emitted"
    replay = httpx.post(relay, content=body, headers=headers)
    assert queued.status_code in (200, 202), queued.text
    assert replay.status_code == 200
    assert replay.json()["outcome"] == "replayed"
    assert replay.json()["record"]["outcome"] == "emitted"
    assert len(merges(prefect, spec_repo, "alpha")) == 1


def test_unrelated_changes_and_other_branches_emit_nothing(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    unrelated = settled(relay, pushed(spec_repo, {"README.md": "# v2\n"}), SECRET)
    branch = deliver(relay, push_body([ALPHA_MANIFEST], ref="refs/heads/feature"), SECRET)
    issue = deliver(relay, {"action": "opened"}, SECRET, headers={"X-Forgejo-Event": "issues"})
    assert unrelated["outcome"] == "no-handoff", unrelated
    assert branch.json()["outcome"] == "ignored"
    assert issue.json()["outcome"] == "ignored"
    assert merges(prefect, spec_repo, "alpha") == []


def test_a_merged_pull_request_reads_its_files_from_a_mirror(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    bare = bare_remote(spec_repo)
    merge, _ = merge_and_push(spec_repo, {ALPHA_MANIFEST: "kind: Deployment\n"}, "alpha v2")
    pull_request = pull_request_body(merge, clone_url=str(bare))
    merged = settled(relay, pull_request, SECRET, headers={"X-Forgejo-Event": "pull_request"})
    # the push of the same merge (both webhooks configured): one handoff, not two
    before = git(spec_repo.work, "rev-parse", "HEAD^1").strip()
    push = settled(relay, push_body([ALPHA_MANIFEST], after=merge, before=before), SECRET)
    assert merged["handoffs"] == ["alpha"], merged
    assert push["outcome"] == "no-handoff", push
    [event] = merges(prefect, spec_repo, "alpha")
    assert (event.merge.kind, event.merge.merge_commit) == ("pull_request", merge)
    assert event.merge.changed == [ALPHA_MANIFEST]


def test_a_spec_added_by_the_merge_itself_is_read_from_the_merge(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    service = f"gamma-{spec_repo.namespace}"
    files = spec_files("gamma", spec_repo.namespace, service)
    payload = pushed(spec_repo, files, "add the gamma handoff")
    git(spec_repo.work, "reset", "-q", "--hard", "HEAD^1")  # the relay's checkout lags behind
    assert not (spec_repo.specs_dir / "gamma.yaml").exists()
    reply = settled(relay, payload, SECRET)
    assert reply["handoffs"] == ["gamma"], reply
    wait_persisted(prefect.api_url)
    [event] = read_merge_events(prefect.api_url, namespace=spec_repo.namespace, service=service)
    assert (event.merge.spec_file, event.merge.merge_commit) == (
        "manifests/handoffs/gamma.yaml",
        payload["after"],
    )
