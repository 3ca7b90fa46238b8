"""The git hook stand-in end to end: a merge pushed to a bare repository runs the
post-receive hook, which posts a signed Forgejo push to `handoff webhook serve`, which
accepts it and emits the merge event for the handoff whose manifest the merge changed,
and only that."""

from __future__ import annotations

from pathlib import Path

from flows.webhook.events import merge_event_id, read_merge_events, wait_persisted
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import final_record
from tests.webhook.servers import PrefectServer, relay_process
from tests.webhook.specrepo import SpecRepo, merge_and_push, with_hooked_remote


def test_a_pushed_merge_reaches_prefect_through_hook_and_relay(
    prefect: PrefectServer, spec_repo: SpecRepo, tmp_path: Path
) -> None:
    with relay_process(
        specs_dir=spec_repo.specs_dir,
        api_url=prefect.api_url,
        secret=SECRET,
        state_dir=tmp_path / "state",
        log=tmp_path / "relay.log",
        options=("--clone-url", str(spec_repo.work.parent / "models.git")),
    ) as url:
        repo = with_hooked_remote(spec_repo, relay_url=url, secret=SECRET)
        merge, pushed = merge_and_push(
            repo, {"manifests/llm-serving/beta.yaml": "kind: Deployment\n"}, "beta: new args"
        )
        _, unrelated = merge_and_push(repo, {"README.md": "# models, v2\n"}, "docs")
        assert '"outcome":"accepted"' in pushed, pushed
        delivery = pushed.split("delivery ")[1].split(":")[0]
        assert final_record(url, delivery)["outcome"] == "emitted"
        other = unrelated.split("delivery ")[1].split(":")[0]
        assert final_record(url, other)["outcome"] == "no-handoff"
    wait_persisted(prefect.api_url)
    [event] = read_merge_events(
        prefect.api_url, namespace=repo.namespace, service=repo.services["beta"]
    )
    assert event.id == merge_event_id(delivery, "beta")
    assert (event.merge.merge_commit, event.merge.repository) == (merge, "riotpiao-poimen/models")
    assert event.merge.changed == ["manifests/llm-serving/beta.yaml"]
    assert (
        read_merge_events(prefect.api_url, namespace=repo.namespace, service=repo.services["alpha"])
        == []
    )
