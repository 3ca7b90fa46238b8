"""The relay's inbox: a signed delivery is stored and answered 202 within a second whatever
git or Prefect are doing; the worker gives it its outcome, retrying Prefect and git
until they answer, resuming after the relay is killed, and emitting each (spec, merge)
once however often it is delivered, or re-emitting the very same event when the relay
died between emitting and recording it. A merge's changed files are read from git, not
from the payload; another repository's delivery is refused."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from cli.webhook import app as webhook_cli
from flows.webhook.app import STORE_FILE, RelaySettings
from flows.webhook.deliveries import DeliveryStore
from flows.webhook.events import MergeEvent, build_event, emit_events, merge_event_id
from sandbox import procs
from tests.webhook.conftest import REPOSITORY, SECRET
from tests.webhook.payloads import (
    deliver,
    final_record,
    forgejo_headers,
    outcome_of,
    pull_request_body,
    push_body,
    record_of,
    settled,
)
from tests.webhook.servers import PrefectServer, running_relay, start_relay_process
from tests.webhook.specrepo import SpecRepo, commit_files, git
from tests.webhook.test_relay import ALPHA_MANIFEST, bare_remote, merges, pushed
from tests.webhook.upstream import front, git_daemon
from tests.world import wait_until

ANSWER_S = 1.0  # what the forge may wait for: GitHub gives up at 10 s, Gitea at 5 s


def timed_delivery(url: str, payload: dict[str, Any], **kw: Any) -> httpx.Response:
    started = time.monotonic()
    response = deliver(url, payload, SECRET, **kw)
    took = time.monotonic() - started
    assert response.status_code == 202, response.text
    assert took < ANSWER_S, f"answered after {took:.2f} s"
    return response


def test_prefect_down_for_a_while_then_up_ends_in_one_event(
    settings: RelaySettings, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    port = int(prefect.api_url.split(":")[2].split("/")[0])
    with front() as gate:  # Prefect's address answers nothing until forwarded
        down = settings.model_copy(
            update={
                "prefect_api_url": f"http://127.0.0.1:{gate.port}/api",
                "prefect_timeout_s": 0.5,
            }
        )
        with running_relay(down) as relay:
            response = timed_delivery(relay, pushed(spec_repo, {ALPHA_MANIFEST: "v: 2\n"}))
            delivery = response.json()["delivery"]
            wait_until(
                lambda: record_of(relay, delivery)["attempts"] >= 2,
                timeout_s=20,
                what="two attempts against the unanswering Prefect",
                every_s=0.1,
            )
            assert record_of(relay, delivery)["state"] == "queued"
            gate.forward_to(port)
            record = final_record(relay, delivery)
    assert record["outcome"] == "emitted", record
    [event] = merges(prefect, spec_repo, "alpha")
    assert event.id == merge_event_id(delivery, "alpha")


def test_the_relay_starts_and_accepts_while_prefect_is_down(
    prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path
) -> None:
    bare = bare_remote(spec_repo)
    record, relay = start_relay_process(
        specs_dir=spec_repo.specs_dir,
        api_url=f"http://127.0.0.1:{procs.free_port()}/api",
        secret=SECRET,
        state_dir=tmp_path / "state",
        log=tmp_path / "relay.log",
        options=("--clone-url", str(bare)),
    )
    try:
        response = timed_delivery(relay, pushed(spec_repo, {ALPHA_MANIFEST: "v: 2\n"}))
        delivery = response.json()["delivery"]
        wait_until(
            lambda: record_of(relay, delivery)["attempts"] >= 1,
            timeout_s=20,
            what="an attempt",
            every_s=0.1,
        )
        assert "unreachable" in record_of(relay, delivery)["detail"]
    finally:
        procs.stop(record)


def test_a_relay_killed_mid_delivery_resumes_it_after_restart(
    prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path
) -> None:
    bare = bare_remote(spec_repo)
    payload = pushed(spec_repo, {ALPHA_MANIFEST: "v: 2\n"})
    with front() as hung, git_daemon(bare.parent) as daemon:
        start = {
            "specs_dir": spec_repo.specs_dir,
            "api_url": prefect.api_url,
            "secret": SECRET,
            "state_dir": tmp_path / "state",
            "log": tmp_path / "relay.log",
            "options": (
                *("--clone-url", f"git://127.0.0.1:{hung.port}/models.git"),
                *("--repository", REPOSITORY, "--git-timeout", "120"),
            ),
        }
        record, relay = start_relay_process(**start)
        try:
            delivery = timed_delivery(relay, payload).json()["delivery"]
            wait_until(lambda: hung.accepted > 0, timeout_s=20, what="a fetch", every_s=0.1)
            os.kill(record.pid, signal.SIGKILL)  # the host dies mid-delivery
        finally:
            procs.stop(record)
        hung.forward_to(daemon)
        record, relay = start_relay_process(**start)  # no redelivery: the store has it
        try:
            final = final_record(relay, delivery)
        finally:
            procs.stop(record)
    assert final["outcome"] == "emitted" and final["handoffs"] == ["alpha"], final
    assert len(merges(prefect, spec_repo, "alpha")) == 1


def test_a_fetch_that_fails_is_retried_not_answered_from_the_checkout(
    settings: RelaySettings, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    bare = bare_remote(spec_repo)
    payload = pushed(spec_repo, {ALPHA_MANIFEST: "v: 2\n"})
    with front() as hung, git_daemon(bare.parent) as daemon:
        url = f"git://127.0.0.1:{hung.port}/models.git"
        flaky = settings.model_copy(update={"clone_url": url, "git_timeout_s": 0.5})
        with running_relay(flaky) as relay:
            delivery = timed_delivery(relay, payload).json()["delivery"]
            wait_until(
                lambda: record_of(relay, delivery)["attempts"] >= 2,
                timeout_s=20,
                what="two failed fetches",
                every_s=0.1,
            )
            assert record_of(relay, delivery)["state"] == "queued"
            hung.forward_to(daemon)
            final = final_record(relay, delivery)
    assert final["outcome"] == "emitted" and final["handoffs"] == ["alpha"], final
    assert len(merges(prefect, spec_repo, "alpha")) == 1


def test_a_spec_change_in_a_commit_the_payload_omits_is_handed_off(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    bare = bare_remote(spec_repo)
    before = git(spec_repo.work, "rev-parse", "HEAD").strip()
    commit_files(spec_repo.work, {ALPHA_MANIFEST: "v: 2\n"}, "alpha v2")
    after = commit_files(spec_repo.work, {"README.md": "# v2\n"}, "docs")
    git(spec_repo.work, "push", "-q", str(bare), "main")
    # as Gitea/Forgejo past FEED_MAX_COMMIT_NUM, or GitHub past its caps: the last only
    payload = push_body(["README.md"], after=after, before=before)
    reply = settled(relay, payload, SECRET)
    assert reply["outcome"] == "emitted" and reply["handoffs"] == ["alpha"], reply
    [event] = merges(prefect, spec_repo, "alpha")
    assert event.merge.changed == [ALPHA_MANIFEST]


def test_another_repositorys_delivery_is_refused(
    settings: RelaySettings, prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path
) -> None:
    payload = pushed(spec_repo, {ALPHA_MANIFEST: "v: 2\n"})
    other_name = {**payload, "repository": {**payload["repository"], "full_name": "org/other"}}
    other_url = {**payload, "repository": {**payload["repository"], "clone_url": "/srv/other"}}
    # the configured name, but a commit the configured repository does not hold
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    git(stranger, "init", "-q", "-b", "main")
    git(stranger, "config", "user.email", "x@example.invalid")
    git(stranger, "config", "user.name", "x")
    foreign = commit_files(stranger, {ALPHA_MANIFEST: "v: 666\n"}, "not ours")
    not_there = push_body([ALPHA_MANIFEST], after=foreign, before=payload["before"])
    with running_relay(settings) as relay:
        replies = [settled(relay, p, SECRET) for p in (other_name, other_url, not_there)]
    for reply, said in zip(replies, ("org/other", "/srv/other", "not on branch"), strict=True):
        assert reply["outcome"] == "refused" and said in reply["detail"], reply
    assert merges(prefect, spec_repo, "alpha") == []


def test_a_merge_emits_once_however_often_it_is_delivered(
    relay: str, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    payload = pushed(spec_repo, {ALPHA_MANIFEST: "v: 2\n"})
    body = json.dumps(payload).encode()
    headers = forgejo_headers(body, SECRET)
    first = outcome_of(relay, httpx.post(relay, content=body, headers=headers))
    again = [settled(relay, payload, SECRET) for _ in range(3)]  # new delivery ids
    pr = pull_request_body(payload["after"], clone_url=None)
    by_pr = settled(relay, pr, SECRET, headers={"X-Forgejo-Event": "pull_request"})
    same_id = httpx.post(relay, content=body, headers=headers).json()
    assert first["outcome"] == "emitted", first
    assert [r["outcome"] for r in (*again, by_pr)] == ["no-handoff"] * 4
    assert same_id["outcome"] == "replayed", same_id
    assert len(merges(prefect, spec_repo, "alpha")) == 1


def test_a_relay_that_died_between_emit_and_record_re_emits_the_same_event(
    settings: RelaySettings, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    payload = pushed(spec_repo, {ALPHA_MANIFEST: "v: 2\n"})
    merge, died = payload["after"], f"died-mid-emit-{uuid.uuid4().hex[:8]}"
    # What a relay leaves when it dies right after Prefect took the event: the intent,
    # never marked emitted.
    event = build_event(
        MergeEvent(
            spec="alpha",
            spec_file="manifests/handoffs/alpha.yaml",
            namespace=spec_repo.namespace,
            service=spec_repo.services["alpha"],
            delivery_id=died,
            merge_commit=merge,
            merged_at=None,
            repository=REPOSITORY,
            branch="main",
            source="forgejo",
            kind="push",
            changed=[ALPHA_MANIFEST],
        ),
        occurred=dt.datetime.now(dt.UTC),
    )
    store = DeliveryStore(settings.state_dir / STORE_FILE)
    assert store.intend(died, {f"alpha@{merge}": event}).to_send == [event]
    emit_events(prefect.api_url, [event])
    with running_relay(settings) as relay:  # the forge redelivers (GitHub keeps the id)
        reply = settled(relay, payload, SECRET)
        again = settled(relay, payload, SECRET)
    assert reply["outcome"] == "emitted" and reply["events"] == [event["id"]], reply
    assert again["outcome"] == "no-handoff", again
    [received] = merges(prefect, spec_repo, "alpha")
    assert str(received.id) == event["id"]


def test_the_deliveries_command_lists_outcomes(
    relay: str, settings: RelaySettings, spec_repo: SpecRepo
) -> None:
    reply = settled(relay, pushed(spec_repo, {ALPHA_MANIFEST: "v: 2\n"}), SECRET)
    result = CliRunner().invoke(webhook_cli, ["deliveries", "--state-dir", str(settings.state_dir)])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if reply["delivery"] in line)
    assert "emitted [alpha]" in line, result.output


def test_merges_relayed_by_the_earlier_replay_guard_stay_relayed(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / STORE_FILE
    with sqlite3.connect(path) as db:  # the replay guard's tables, as earlier relays left them
        db.execute("CREATE TABLE deliveries (id TEXT PRIMARY KEY, at REAL, state TEXT)")
        db.execute("CREATE TABLE merges (key TEXT PRIMARY KEY, delivery TEXT, at REAL, state TEXT)")
        db.execute("INSERT INTO merges VALUES ('alpha@" + "a" * 40 + "', 'd-old', 1.0, 'done')")
    store = DeliveryStore(path)
    emits = store.intend("d-new", {"alpha@" + "a" * 40: {"id": "x"}})
    assert (emits.to_send, emits.earlier) == ([], {"alpha@" + "a" * 40: "d-old"})
