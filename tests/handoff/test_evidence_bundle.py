"""The evidence bundle of a real side-by-side handoff, signed with a generated key:
`handoff history RUN_ID --verify` passes, and fails, naming the check, once the stored
bundle's predicate or signature is changed, with another key, and once the Service no
longer routes to the subject. A run without a key writes its bundle unsigned and says so."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from flows.kube.bundles import BUNDLES_CONFIGMAP
from flows.kube.client import Kube
from flows.ledger import history_entries, parse_ledger
from flows.report.attest import KEY_ENV, PAYLOAD_TYPE, keygen
from tests.world import run_handoff, service, spec_in

pytestmark = pytest.mark.timeout(600)


def _history(env: dict[str, str], namespace: str, *args: str) -> tuple[int, str]:
    """`handoff history` in process (each process start costs seconds on a busy machine)."""
    done = CliRunner().invoke(
        app,
        ["history", *args, "--namespace", namespace, "--kubeconfig", env["KUBECONFIG"]],
        env=env,
    )
    return done.exit_code, done.output


def _verify(env: dict[str, str], namespace: str, run_id: str, *extra: str) -> tuple[int, str]:
    return _history(env, namespace, run_id, "--verify", *extra)


def _set_bundle(kube: Kube, namespace: str, key: str, text: str) -> None:
    kube.core.patch_namespaced_config_map(BUNDLES_CONFIGMAP, namespace, {"data": {key: text}})


@pytest.mark.invariants(
    "the test points the Service at the old, retired workload to show verify fails",
    allow=("I1", "I3"),
    services=("clef-serve",),
)
def test_a_real_handoffs_bundle_verifies_and_a_tampered_one_does_not(
    kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    key = tmp_path / "signing.key"
    public = keygen(key)
    env = {**handoff_env, KEY_ENV: str(key)}
    handoff_env = {**handoff_env, KEY_ENV: ""}  # the runs and checks below have no key
    # Gates are not under test: the parity gate (its golden's hash is in the bundle) only.
    spec_file = spec_in(seeded, "clef-candle", tmp_path, gates={"latency": None})
    result = run_handoff(spec_file, env, "--auto-approve")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    svc = service(kube, seeded, "clef-serve")
    ledger = parse_ledger(svc.metadata.annotations)
    assert ledger is not None and ledger.phase == "done"
    entry = history_entries(svc.metadata.annotations)[-1]
    ref = entry["evidence_bundle"]
    assert ref["signed"] and ref["keyid"].startswith("ed25519:") and "note" not in ref, ref
    stored = kube.core.read_namespaced_config_map(BUNDLES_CONFIGMAP, seeded).data[ref["key"]]
    assert hashlib.sha256(stored.encode()).hexdigest() == ref["sha256"]

    # What it says: the subject is what the Service now serves, the predicate the run's.
    envelope = json.loads(stored)
    assert envelope["payloadType"] == PAYLOAD_TYPE
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    digest = (ledger.image or "").split("@sha256:")[1]
    assert {"sha256": digest} in [s["digest"] for s in statement["subject"]]
    assert {"handoff.dev/revision": ledger.revision} in [s["digest"] for s in statement["subject"]]
    predicate = statement["predicate"]
    assert predicate["strategy"] == "side-by-side"
    assert [g["verdict"] for g in predicate["gates"]] == ["pass", "pass"]
    assert all(g["figures_sha256"] for g in predicate["gates"])
    assert predicate["fixes"]["proven"][0]["found"] in ("ancestor", "cherry-pick")
    golden = predicate["inputs"]["parity_golden"]
    assert golden["sha256"] == hashlib.sha256(Path(golden["path"]).read_bytes()).hexdigest()
    assert predicate["approvals"] == entry.get("approvals", [])
    assert predicate["evidence_sha256"] == ledger.evidence_sha256

    # Verified with the public half of the key file, and with the public key file.
    code, out = _verify(env, seeded, entry["handoff_id"])
    assert code == 0, out
    code, out = _verify(handoff_env, seeded, entry["handoff_id"], "--public-key", str(public))
    assert code == 0, out
    for what in ("digest", "signature", "statement", "subject still served"):
        assert f"ok      {what}:" in out, out

    # Another key.
    other = keygen(tmp_path / "other.key")
    code, out = _verify(handoff_env, seeded, entry["handoff_id"], "--public-key", str(other))
    assert code == 1 and "FAILED  signature: no signature verifies with key" in out, out

    # A changed predicate (other figures behind the same verdicts), its signature kept.
    gates = [{**g, "figures_sha256": "0" * 64} for g in predicate["gates"]]
    changed = dict(statement, predicate={**predicate, "gates": gates})
    forged = dict(envelope, payload=base64.b64encode(json.dumps(changed).encode()).decode())
    _set_bundle(kube, seeded, ref["key"], json.dumps(forged))
    code, out = _verify(handoff_env, seeded, entry["handoff_id"], "--public-key", str(public))
    assert code == 1, out
    assert "FAILED  digest" in out and "FAILED  signature" in out, out

    # A changed signature over the original statement.
    sig = base64.b64decode(envelope["signatures"][0]["sig"])
    flipped = bytes([sig[0] ^ 1]) + sig[1:]
    resigned = dict(
        envelope,
        signatures=[{**envelope["signatures"][0], "sig": base64.b64encode(flipped).decode()}],
    )
    _set_bundle(kube, seeded, ref["key"], json.dumps(resigned))
    code, out = _verify(handoff_env, seeded, entry["handoff_id"], "--public-key", str(public))
    assert code == 1 and "FAILED  signature" in out, out

    # Run again without a key: nothing to do, a record whose bundle is unsigned and says
    # so, and the first record's bundle kept as it was stored.
    _set_bundle(kube, seeded, ref["key"], stored)
    again = run_handoff(spec_file, handoff_env, "--auto-approve")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    unsigned = history_entries(service(kube, seeded, "clef-serve").metadata.annotations)[-1]
    assert unsigned["handoff_id"] != entry["handoff_id"] and not unsigned["changed"], unsigned
    assert not unsigned["evidence_bundle"]["signed"], unsigned["evidence_bundle"]
    assert f"unsigned: ${KEY_ENV} is not set" in unsigned["evidence_bundle"]["note"]
    code, out = _verify(handoff_env, seeded, unsigned["handoff_id"], "--public-key", str(public))
    assert code == 1 and "FAILED  signature: the bundle is unsigned" in out, out
    code, shown = _history(handoff_env, seeded, unsigned["handoff_id"])
    assert code == 0 and "(UNSIGNED)" in shown and "is not set" in shown, shown
    code, out = _verify(handoff_env, seeded, entry["handoff_id"], "--public-key", str(public))
    assert code == 0, out

    # The Service no longer routes to the subject.
    kube.core.patch_namespaced_service("clef-serve", seeded, {"spec": {"selector": None}})
    kube.core.patch_namespaced_service(
        "clef-serve", seeded, {"spec": {"selector": {"app": "clef-serve"}}}
    )
    code, out = _verify(handoff_env, seeded, entry["handoff_id"], "--public-key", str(public))
    assert code == 1 and "FAILED  subject still served" in out, out
    assert "ok      signature" in out, out
