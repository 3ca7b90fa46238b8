"""Where the relay fetches a merge from: never a payload value as a git option, only
https/http/ssh/git URLs on the hosts its configuration allows, and only the repository
URL it is configured with: a payload naming another is refused, never fetched."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.webhook.app import RelaySettings
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import pull_request_body, push_body, settled
from tests.webhook.servers import running_relay
from tests.webhook.specrepo import SpecRepo, git, merge_and_push
from tests.webhook.test_relay import ALPHA_MANIFEST, bare_remote
from tests.webhook.upstream import front


def hostile_urls(canary: Path) -> list[str]:
    return [
        f"--upload-pack=touch {canary}.1",
        f"-u touch {canary}.2",
        f"--config=core.sshCommand=touch {canary}.3",
        f"ext::sh -c touch% {canary}.4",
        f"ssh://-oProxyCommand=touch%20{canary}.5/x",
        f"file://{canary}.6",
        "/etc",
    ]


@pytest.mark.parametrize("kind", ["push", "pull_request"])
def test_a_clone_url_never_reaches_git_as_an_option_or_an_unlisted_transport(
    settings: RelaySettings, tmp_path: Path, kind: str
) -> None:
    canary = tmp_path / "pwned"
    from_payload = settings.model_copy(update={"clone_url": None})
    with running_relay(from_payload) as relay:
        for url in hostile_urls(canary):
            if kind == "push":
                reply = settled(relay, push_body([ALPHA_MANIFEST], clone_url=url), SECRET)
            else:
                body = pull_request_body("a" * 40, clone_url=url)
                reply = settled(relay, body, SECRET, headers={"X-Forgejo-Event": "pull_request"})
            assert reply["outcome"] == "refused", (url, reply)
            assert "clone" in reply["detail"], reply
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("pwned")) == []


def test_a_payload_naming_another_clone_url_is_refused_and_never_fetched(
    settings: RelaySettings, spec_repo: SpecRepo, tmp_path: Path
) -> None:
    bare = bare_remote(spec_repo)
    merge, _ = merge_and_push(spec_repo, {ALPHA_MANIFEST: "kind: Deployment\n"}, "alpha v2")
    decoy = tmp_path / "decoy.git"
    git(tmp_path, "init", "-q", "--bare", str(decoy))
    configured = settings.model_copy(update={"clone_url": str(bare)})
    event = {"X-Forgejo-Event": "pull_request"}
    with running_relay(configured) as relay:
        elsewhere = settled(
            relay, pull_request_body(merge, clone_url=f"file://{decoy}"), SECRET, headers=event
        )
        same = settled(relay, pull_request_body(merge, clone_url=f"{bare}/"), SECRET, headers=event)
    assert elsewhere["outcome"] == "refused" and "--clone-url" in elsewhere["detail"], elsewhere
    assert same["handoffs"] == ["alpha"], same


def test_a_host_off_the_allow_list_is_never_dialled(settings: RelaySettings) -> None:
    allowed = settings.model_copy(
        update={"clone_url": None, "clone_hosts": frozenset({"forge.example"})}
    )
    with front() as upstream, running_relay(allowed) as relay:
        for scheme in ("http", "git", "https", "ssh"):
            url = f"{scheme}://127.0.0.1:{upstream.port}/models.git"
            reply = settled(
                relay,
                pull_request_body("a" * 40, clone_url=url),
                SECRET,
                headers={"X-Forgejo-Event": "pull_request"},
            )
            assert reply["outcome"] == "refused", reply
            assert "127.0.0.1" in reply["detail"] and "--clone-host" in reply["detail"], reply
        assert upstream.accepted == 0
