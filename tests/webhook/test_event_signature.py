"""Merge events the relay signs: a worker holding the relay's public key refuses a run
whose trigger names a merge commit without the relay's signature (a Prefect user posting
their own event or starting their own run), before the commit is cloned (the pull step)
and when the flow starts; the relay's events verify."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pytest
from prefect import get_client
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows import checkout
from flows.handoff import handoff
from flows.newest import compute_newest
from flows.report.attest import keygen, load_private_key
from flows.webhook import event_signature
from flows.webhook.event_signature import (
    PUBLIC_KEY_ENV,
    UnsignedTrigger,
    check_trigger,
    public_key_file,
    sign_event,
)
from flows.webhook.events import build_event, emit_events, read_merge_events, wait_persisted
from flows.webhook.settings import RelaySettings
from tests.webhook.conftest import SECRET
from tests.webhook.payloads import deliver, outcome_of
from tests.webhook.servers import PrefectServer, running_relay
from tests.webhook.specrepo import SpecRepo
from tests.webhook.test_relay import ALPHA_MANIFEST, pushed

SPEC_FILE = "manifests/handoffs/alpha.yaml"


@pytest.fixture
def relay_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The relay's key pair; the worker's side holds the public half."""
    private = tmp_path / "relay.key"
    public = keygen(private)
    monkeypatch.setenv(PUBLIC_KEY_ENV, str(public))
    return private


def _trigger(**fields: Any) -> dict[str, Any]:
    return {
        "source": "forgejo",
        "delivery_id": "d-1",
        "merge_commit": "1" * 40,
        "repository": "riotpiao-poimen/models",
        **fields,
    }


def test_the_relays_events_verify_and_a_changed_one_does_not(
    relay_key: Path, settings: RelaySettings, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    signing = settings.model_copy(update={"event_key_file": relay_key})
    with running_relay(signing) as relay:
        payload = pushed(spec_repo, {ALPHA_MANIFEST: "v: signed\n"})
        assert outcome_of(relay, deliver(relay, payload, SECRET))["outcome"] == "emitted"
    wait_persisted(prefect.api_url)
    [event] = [
        e.merge
        for e in read_merge_events(
            prefect.api_url, namespace=spec_repo.namespace, service=spec_repo.services["alpha"]
        )
        if e.merge.merge_commit == payload["after"]
    ]
    # What prefect.yaml's trigger hands the run: the spec file and these fields.
    trigger = {k: getattr(event, k) for k in ("source", "delivery_id", "merge_commit")} | {
        "repository": event.repository,
        "signature": event.signature,
        # As the trigger's template renders it: the payload's text.
        "merged_at": event.model_dump(mode="json")["merged_at"],
    }
    assert event.merged_at is not None
    assert check_trigger(event.spec_file, trigger) == "signed"
    with pytest.raises(UnsignedTrigger, match="does not verify"):
        check_trigger(event.spec_file, trigger | {"merge_commit": "f" * 40})
    # The merge time orders merges (flows/newest.py): a replayed event made newer fails.
    later = (event.merged_at + dt.timedelta(days=1)).isoformat()
    with pytest.raises(UnsignedTrigger, match="does not verify"):
        check_trigger(event.spec_file, trigger | {"merged_at": later})
    with pytest.raises(UnsignedTrigger, match="does not verify"):
        check_trigger("manifests/handoffs/beta.yaml", trigger)


def test_a_trigger_without_the_relays_signature_is_refused(relay_key: Path) -> None:
    with pytest.raises(UnsignedTrigger, match="no relay signature"):
        check_trigger(SPEC_FILE, _trigger())
    other = relay_key.parent / "other.key"
    keygen(other)
    forged = sign_event({**_trigger(), "spec_file": SPEC_FILE}, load_private_key(other))
    with pytest.raises(UnsignedTrigger, match="does not verify"):
        check_trigger(SPEC_FILE, _trigger(signature=forged))
    # A run naming no commit hands off the branch's head: nothing to prove.
    assert check_trigger(SPEC_FILE, _trigger(merge_commit=None)) == ""
    assert check_trigger(SPEC_FILE, None) == ""


def test_a_merge_without_a_time_verifies_as_the_trigger_renders_it(relay_key: Path) -> None:
    """A payload's null merge time reaches the run as the text "None"."""
    values = {**_trigger(), "spec_file": SPEC_FILE, "merged_at": None}
    signature = sign_event(values, load_private_key(relay_key))
    assert check_trigger(SPEC_FILE, _trigger(signature=signature, merged_at="None")) == "signed"


def test_the_newest_check_counts_only_the_relays_merges(
    relay_key: Path, settings: RelaySettings, prefect: PrefectServer, spec_repo: SpecRepo
) -> None:
    """A Prefect user's own merge event for the Service, unsigned or signed with another
    key and dated later, does not supersede the relay's merge."""
    signing = settings.model_copy(update={"event_key_file": relay_key})
    with running_relay(signing) as relay:
        payload = pushed(spec_repo, {ALPHA_MANIFEST: "v: newest\n"})
        assert outcome_of(relay, deliver(relay, payload, SECRET))["outcome"] == "emitted"
    service = spec_repo.services["alpha"]
    wait_persisted(prefect.api_url)
    [real] = [
        m
        for m in read_merge_events(prefect.api_url, namespace=spec_repo.namespace, service=service)
        if m.merge.merge_commit == payload["after"]
    ]
    other = relay_key.parent / "other.key"
    keygen(other)
    forged = []
    for n, key in enumerate((None, load_private_key(other))):
        merge = real.merge.model_copy(
            update={
                "delivery_id": f"forged-{n}-{uuid.uuid4().hex[:6]}",
                "merge_commit": f"{n + 2}" * 40,
                "merged_at": dt.datetime.now(dt.UTC) + dt.timedelta(hours=1),
                "signature": "",
            }
        )
        forged.append(merge.merge_commit)
        emit_events(
            prefect.api_url, [build_event(merge, occurred=dt.datetime.now(dt.UTC), key=key)]
        )
    wait_persisted(prefect.api_url)
    merges = read_merge_events(prefect.api_url, namespace=spec_repo.namespace, service=service)
    assert set(forged) <= {m.merge.merge_commit for m in merges}
    check = compute_newest(real.id, merges, public=public_key_file())
    assert check.newest, check.reason
    assert "2 merge events not signed by the relay" in check.reason, check.reason


def test_the_hosts_fixed_key_holds_whatever_a_runs_env_says(
    relay_key: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's job variables set its env: with the key at the host's fixed path, an env
    that unsets or redirects $HANDOFF_EVENT_PUBLIC_KEY_FILE checks all the same."""
    fixed = tmp_path / "etc" / "key.pub"
    monkeypatch.setattr(event_signature, "FIXED_PUBLIC_KEY", fixed)
    monkeypatch.delenv(PUBLIC_KEY_ENV)
    assert check_trigger(SPEC_FILE, _trigger()) == ""  # no key anywhere: nothing to check
    fixed.parent.mkdir()
    fixed.write_bytes(relay_key.with_suffix(".pub").read_bytes())
    with pytest.raises(UnsignedTrigger, match="no relay signature"):
        check_trigger(SPEC_FILE, _trigger())
    mine = tmp_path / "mine.key"
    monkeypatch.setenv(PUBLIC_KEY_ENV, str(keygen(mine)))
    signed_by_me = sign_event({**_trigger(), "spec_file": SPEC_FILE}, load_private_key(mine))
    with pytest.raises(UnsignedTrigger, match=f"does not verify with {fixed}"):
        check_trigger(SPEC_FILE, _trigger(signature=signed_by_me))


def test_without_the_public_key_nothing_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PUBLIC_KEY_ENV, raising=False)
    assert check_trigger(SPEC_FILE, _trigger()) == ""


def test_a_forged_run_is_refused_before_its_commit_is_cloned_and_by_the_flow(
    relay_key: Path, prefect: PrefectServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Prefect user creates a run with a trigger of their own: the pull step refuses it
    before cloning; the flow refuses it before reading the spec."""
    forged = _trigger(delivery_id=f"d-{uuid.uuid4().hex[:6]}")
    with temporary_settings({PREFECT_API_URL: prefect.api_url}):
        with get_client(sync_client=True) as client:
            flow_id = client.create_flow_from_name("handoff")
            deployment = client.create_deployment(flow_id, f"forged-{uuid.uuid4().hex[:6]}")
            run = client.create_flow_run_from_deployment(
                deployment, parameters={"spec_file": SPEC_FILE, "trigger": forged}
            )
        monkeypatch.setenv("PREFECT__FLOW_RUN_ID", str(run.id))
        with pytest.raises(UnsignedTrigger, match="no relay signature"):
            checkout.run_commit()
        monkeypatch.delenv("PREFECT__FLOW_RUN_ID")
        with pytest.raises(UnsignedTrigger, match="no relay signature"):
            handoff(spec_file="/nonexistent/spec.yaml", trigger=forged)  # type: ignore[arg-type]
        with get_client(sync_client=True) as client:
            client.delete_deployment(deployment)
