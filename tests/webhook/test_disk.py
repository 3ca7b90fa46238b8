"""What the relay keeps on disk stays bounded while it runs: final delivery records beyond
the cap are pruned as new ones are written (merges emitted are kept), and git mirrors
beyond their count or size cap are pruned after each fetch (least recently used first)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from flows.webhook.app import RelaySettings
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import deliver, pull_request_body, push_body, settled
from tests.webhook.servers import running_relay
from tests.webhook.specrepo import SpecRepo, git, merge_and_push
from tests.webhook.test_relay import ALPHA_MANIFEST, bare_remote
from tests.webhook.upstream import git_daemon


def rows(state_dir: Path, table: str) -> int:
    with sqlite3.connect(state_dir / "deliveries.sqlite") as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_delivery_records_are_pruned_while_the_relay_runs(settings: RelaySettings) -> None:
    capped = settings.model_copy(update={"max_records": 5})
    with running_relay(capped) as relay:
        for n in range(12):
            push = push_body([ALPHA_MANIFEST], after=f"{n:x}" * 40, ref="refs/heads/other")
            reply = deliver(relay, push, SECRET)
            assert reply.json()["outcome"] == "ignored", reply.text
        assert rows(settings.state_dir, "inbox") <= 5


@pytest.mark.parametrize(("max_mirrors", "max_bytes", "kept"), [(2, 1 << 30, 2), (4, 1, 0)])
def test_mirrors_are_pruned_by_count_and_size(
    settings: RelaySettings, spec_repo: SpecRepo, max_mirrors: int, max_bytes: int, kept: int
) -> None:
    bare = bare_remote(spec_repo)
    merge, _ = merge_and_push(spec_repo, {ALPHA_MANIFEST: "kind: Deployment\n"}, "alpha v2")
    for n in range(3):
        git(bare.parent, "clone", "-q", "--bare", str(bare), f"models-{n}.git")
    capped = settings.model_copy(
        update={"max_mirrors": max_mirrors, "max_mirror_bytes": max_bytes, "clone_url": None}
    )
    with git_daemon(bare.parent) as port, running_relay(capped) as relay:
        for n in range(3):  # the repository's copies at three URLs: a mirror each
            body = pull_request_body(merge, clone_url=f"git://127.0.0.1:{port}/models-{n}.git")
            reply = settled(relay, body, SECRET, headers={"X-Forgejo-Event": "pull_request"})
            assert reply["outcome"] in ("emitted", "no-handoff"), reply
    mirrors = sorted(p.name for p in (settings.state_dir / "mirrors").glob("*.git"))
    assert len(mirrors) == kept, mirrors
    if kept:  # the most recently used stay
        assert all("models-0" not in name for name in mirrors), mirrors
