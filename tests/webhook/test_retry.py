"""A delivery counts as seen only once its outcome is final: one that failed, timed out,
or was cut short by the relay dying is processed when the forge delivers it again, and
one still in flight is answered 503 (retry), never "replayed"."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel

from flows.webhook.app import RelaySettings
from sandbox import procs
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import forgejo_headers, pull_request_body
from tests.webhook.servers import PrefectServer, running_relay, start_relay_process
from tests.webhook.specrepo import SpecRepo, merge_and_push
from tests.webhook.test_relay import ALPHA_MANIFEST, bare_remote, merges
from tests.webhook.upstream import Front, front, git_daemon


class Merged(BaseModel):
    """A signed delivery of a merged pull request whose clone URL is a Front."""

    body: bytes
    headers: dict[str, str]


@pytest.fixture
def upstream(spec_repo: SpecRepo) -> Iterator[tuple[Front, int]]:
    """A hanging front for the spec repository's remote, and the daemon it can forward to."""
    bare = bare_remote(spec_repo)
    with front() as hung, git_daemon(bare.parent) as daemon:
        yield hung, daemon


def merged_pull_request(spec_repo: SpecRepo, port: int) -> Merged:
    merge, _ = merge_and_push(spec_repo, {ALPHA_MANIFEST: "kind: Deployment\n"}, "alpha v2")
    url = f"git://127.0.0.1:{port}/models.git"
    body = json.dumps(pull_request_body(merge, clone_url=url)).encode()
    return Merged(body=body, headers=forgejo_headers(body, SECRET, event="pull_request"))


def post_in_background(url: str, merged: Merged) -> tuple[threading.Thread, list[object]]:
    answers: list[object] = []

    def post() -> None:
        try:
            answers.append(httpx.post(url, content=merged.body, headers=merged.headers, timeout=60))
        except httpx.HTTPError as exc:
            answers.append(exc)

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread, answers


def wait_accepted(hung: Front) -> None:
    deadline = time.monotonic() + 20
    while hung.accepted == 0:
        assert time.monotonic() < deadline, "the relay never dialled the upstream"
        time.sleep(0.05)


def test_a_delivery_in_flight_is_not_a_replay_and_its_failure_is_retried(
    settings: RelaySettings,
    prefect: PrefectServer,
    spec_repo: SpecRepo,
    upstream: tuple[Front, int],
) -> None:
    hung, daemon = upstream
    merged = merged_pull_request(spec_repo, hung.port)
    quick = settings.model_copy(
        update={"git_timeout_s": 3.0, "clone_hosts": frozenset({"127.0.0.1"})}
    )
    with running_relay(quick) as relay:
        thread, answers = post_in_background(relay, merged)
        wait_accepted(hung)
        again = httpx.post(relay, content=merged.body, headers=merged.headers, timeout=30)
        thread.join(timeout=30)
        hung.forward_to(daemon)
        retried = httpx.post(relay, content=merged.body, headers=merged.headers, timeout=30)
        replayed = httpx.post(relay, content=merged.body, headers=merged.headers, timeout=30)
    [first] = answers
    assert isinstance(first, httpx.Response) and first.status_code == 503, first
    assert again.status_code == 503, again.text
    assert retried.status_code == 200 and retried.json()["handoffs"] == ["alpha"], retried.text
    assert replayed.json()["outcome"] == "replayed", replayed.text
    assert len(merges(prefect, spec_repo, "alpha")) == 1


def test_a_delivery_cut_short_by_a_crash_is_processed_on_retry(
    prefect: PrefectServer, spec_repo: SpecRepo, upstream: tuple[Front, int], tmp_path: Path
) -> None:
    hung, daemon = upstream
    merged = merged_pull_request(spec_repo, hung.port)
    start = {
        "specs_dir": spec_repo.specs_dir,
        "api_url": prefect.api_url,
        "secret": SECRET,
        "state_dir": tmp_path / "state",
        "log": tmp_path / "relay.log",
        "options": ("--clone-host", "127.0.0.1", "--git-timeout", "120"),
    }
    record, relay = start_relay_process(**start)
    try:
        thread, _ = post_in_background(relay, merged)
        wait_accepted(hung)
        os.kill(record.pid, signal.SIGKILL)  # the host dies mid-delivery
        thread.join(timeout=30)
    finally:
        procs.stop(record)
    hung.forward_to(daemon)
    record, relay = start_relay_process(**start)
    try:
        retried = httpx.post(relay, content=merged.body, headers=merged.headers, timeout=30)
    finally:
        procs.stop(record)
    assert retried.status_code == 200, retried.text
    assert retried.json()["handoffs"] == ["alpha"], retried.text
    assert len(merges(prefect, spec_repo, "alpha")) == 1
