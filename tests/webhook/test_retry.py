"""A delivery is retried by the relay itself until its outcome is final: the forge's own
redelivery of it meanwhile is answered 202 (it is queued), never "replayed", and does
not add an attempt of its own; once final, the same id is a replay. (The relay killed
mid-delivery and restarted: tests/webhook/test_inbox.py.)"""

from __future__ import annotations

import json

import httpx

from flows.webhook.app import RelaySettings
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import final_record, forgejo_headers, pull_request_body, record_of
from tests.webhook.servers import PrefectServer, running_relay
from tests.webhook.specrepo import SpecRepo, merge_and_push
from tests.webhook.test_relay import ALPHA_MANIFEST, bare_remote, merges
from tests.webhook.upstream import front, git_daemon
from tests.world import wait_until


def test_a_redelivery_while_queued_is_not_a_replay_and_one_event_results(
    settings: RelaySettings, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    bare = bare_remote(spec_repo)
    merge, _ = merge_and_push(spec_repo, {ALPHA_MANIFEST: "kind: Deployment\n"}, "alpha v2")
    with front() as hung, git_daemon(bare.parent) as daemon:
        url = f"git://127.0.0.1:{hung.port}/models.git"
        body = json.dumps(pull_request_body(merge, clone_url=url)).encode()
        headers = forgejo_headers(body, SECRET, event="pull_request")
        quick = settings.model_copy(update={"clone_url": url, "git_timeout_s": 1.0})
        with running_relay(quick) as relay:
            first = httpx.post(relay, content=body, headers=headers, timeout=30)
            delivery = first.json()["delivery"]
            wait_until(lambda: hung.accepted > 0, timeout_s=20, what="a fetch", every_s=0.1)
            again = httpx.post(relay, content=body, headers=headers, timeout=30)
            assert record_of(relay, delivery)["state"] == "queued"
            hung.forward_to(daemon)
            final = final_record(relay, delivery)
            replayed = httpx.post(relay, content=body, headers=headers, timeout=30)
    assert first.status_code == 202 and again.status_code == 202, again.text
    assert final["outcome"] == "emitted" and final["handoffs"] == ["alpha"], final
    assert replayed.json()["outcome"] == "replayed", replayed.text
    assert len(merges(prefect, spec_repo, "alpha")) == 1
