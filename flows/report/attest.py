"""The handoff's evidence bundle: an in-toto Statement v1 in a DSSE envelope, signed with
Ed25519, and its verification.

The Statement names the subject (the pinned image by digest, the candidate's revision
label) and carries the predicate: the required fix commits and how each was found, the
hashes of the files the gates judged by (golden outputs, task suite, golden scores, the
candidate manifest, the spec), every gate's verdict with the hash of its figures and the
hash of what the approver was shown, every approval, the strategy and the declared and
measured downtime. The bundle is stored in the namespace's ConfigMap
(flows/kube/bundles.py); the history entry carries its sha256, its key, whether it is
signed and by which key. Without a key the bundle is stored unsigned and the entry says
so; verification then fails on the signature, never passes it silently.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, Field, ValidationError

from flows.errors import HandoffError, PermanentError
from flows.kube.bundles import BUNDLES_CONFIGMAP, pods_and_images, read_bundles, store_bundle
from flows.kube.client import Kube
from flows.kube.read import read_service
from flows.ledger import REVISION_LABEL
from flows.provenance import FixEvidence
from flows.spec import HandoffSpec

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://handoff.dev/evidence/v1"
KEY_ENV = "HANDOFF_SIGNING_KEY_FILE"


class SigningKeyError(PermanentError):
    """A signing or verification key that cannot be used."""


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what is signed, never the payload alone."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def canonical(value: Any) -> bytes:
    """The one serialisation that is hashed and signed: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _b64decode(text: str) -> bytes:
    """Standard or URL-safe base64, as DSSE verifiers must accept either."""
    padded = text + "=" * (-len(text) % 4)
    try:
        if "-" in text or "_" in text:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not base64: {exc}") from exc


class Signature(BaseModel):
    keyid: str = ""
    sig: str


class Envelope(BaseModel):
    payload: str
    payloadType: str  # the DSSE envelope's own field name
    signatures: list[Signature] = Field(default_factory=list)

    def body(self) -> bytes:
        return _b64decode(self.payload)


class BundleRef(BaseModel):
    """What the history entry keeps of the bundle."""

    sha256: str = Field(description="of the envelope exactly as stored")
    configmap: str
    key: str
    signed: bool
    keyid: str | None = None
    note: str | None = Field(None, description="why it is unsigned or not stored")


# Keys ---------------------------------------------------------------------------------


def keyid(public: Ed25519PublicKey) -> str:
    """sha256 of the raw public key: names the key in the envelope and the history."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + sha256_hex(raw)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SigningKeyError(
            f"signing key {path}: expected an unencrypted Ed25519 private key in PEM "
            f"(as `handoff keygen` writes), could not read it: {exc}"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(
            f"signing key {path}: expected an Ed25519 key, found {type(key).__name__}; "
            "make one with `handoff keygen`"
        )
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """A PEM public key, or the public half of a PEM private key."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SigningKeyError(f"public key {path}: cannot read it ({exc})") from exc
    if b"PRIVATE KEY" in data:
        return load_private_key(path).public_key()
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(
            f"public key {path}: expected an Ed25519 public key in PEM (as `handoff keygen` "
            f"writes), could not read it: {exc}"
        ) from exc
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"public key {path}: expected Ed25519, found {type(key).__name__}")
    return key


def keygen(private_path: Path) -> Path:
    """A new Ed25519 key pair: the private key at private_path (mode 0600, never
    overwritten) and the public key beside it as `.pub`; returns the public key's path."""
    key = Ed25519PrivateKey.generate()
    public_path = private_path.with_suffix(".pub")
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    public_path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return public_path


# The Statement --------------------------------------------------------------------------


def _file_hash(spec: HandoffSpec, path: Path | None) -> dict[str, str] | None:
    if path is None:
        return None
    if not path.is_absolute() and spec.source_file is not None:
        path = spec.source_file.parent / path
    try:
        return {"path": str(path), "sha256": sha256_hex(path.read_bytes())}
    except OSError as exc:
        return {"path": str(path), "error": f"not readable at the end of the run: {exc}"}


def subject(entry: dict[str, Any], candidate: str) -> list[dict[str, Any]]:
    """The pinned image by its digest, and the candidate Deployment's revision label."""
    found = []
    image = entry.get("image") or ""
    if "@sha256:" in image:
        name, digest = image.split("@sha256:", 1)
        found.append({"name": name, "digest": {"sha256": digest}})
    if entry.get("revision"):
        found.append(
            {
                "name": f"{entry['namespace']}/deployment/{candidate}",
                "digest": {REVISION_LABEL: entry["revision"]},
            }
        )
    return found


_HANDOFF_KEYS = (
    "handoff_id", "spec", "namespace", "service", "outcome", "cause",
    "started_at", "finished_at", "flow_run_id", "trigger",
)  # fmt: skip


def statement(
    spec: HandoffSpec, entry: dict[str, Any], fixes: Sequence[FixEvidence]
) -> dict[str, Any]:
    """The in-toto Statement of one finished handoff (entry: its record, as a dict)."""
    figures = entry.get("gate_figures") or {}
    task = spec.gates.task
    predicate = {
        "handoff": {k: entry.get(k) for k in _HANDOFF_KEYS},
        "strategy": entry.get("strategy"),
        "candidate": spec.candidate.deployment,
        "image": {"pinned": entry.get("image"), "tag": spec.image.tag, "source": spec.image.source},
        "fixes": {
            "required": list(spec.image.requires),
            "proven": [f.model_dump() for f in fixes],
            "note": None
            if fixes or not spec.image.requires
            else "not proven in this run: it resumed past the image wait, or ended before it",
        },
        "inputs": {
            "spec": _file_hash(spec, spec.source_file),
            "candidate_manifest": _file_hash(spec, spec.candidate.manifest),
            "parity_golden": _file_hash(spec, spec.gates.parity.golden)
            if spec.gates.parity
            else None,
            "task_suite": _file_hash(spec, task.suite) if task else None,
            "task_golden": _file_hash(spec, task.golden) if task else None,
        },
        "gates": [
            {
                "name": name,
                "verdict": verdict,
                "figures_sha256": sha256_hex(canonical(figures[name])) if name in figures else None,
            }
            for name, verdict in (entry.get("gates") or {}).items()
        ],
        "evidence_sha256": entry.get("evidence_sha256"),
        "approvals": entry.get("approvals") or [],
        "downtime": {
            "declared_bound_s": entry.get("downtime_bound_s"),
            "declared_estimate_s": entry.get("downtime_estimate_s"),
            "measured_s": entry.get("downtime_measured_s"),
        },
    }
    return {
        "_type": STATEMENT_TYPE,
        "subject": subject(entry, spec.candidate.deployment),
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def envelope(body: bytes, key: Ed25519PrivateKey | None) -> Envelope:
    """The DSSE envelope of body, signed over its PAE when a key is given."""
    signatures = (
        [
            Signature(
                keyid=keyid(key.public_key()),
                sig=base64.b64encode(key.sign(pae(PAYLOAD_TYPE, body))).decode(),
            )
        ]
        if key is not None
        else []
    )
    return Envelope(
        payload=base64.b64encode(body).decode(), payloadType=PAYLOAD_TYPE, signatures=signatures
    )


def bundle_key(entry: dict[str, Any]) -> str:
    """One key per service, handoff and outcome (a ConfigMap key's characters only)."""
    return f"{entry['service']}.{entry['handoff_id']}.{entry['outcome']}.json"


def publish(
    kube: Kube,
    spec: HandoffSpec,
    entry: dict[str, Any],
    fixes: Sequence[FixEvidence],
    *,
    kept: set[str],
) -> BundleRef:
    """Make, sign (with the key in $HANDOFF_SIGNING_KEY_FILE, if set) and store the bundle;
    kept: the keys of this Service's bundles its history still names (the others go).
    A missing or unusable key, or a store the apiserver refused, is said in the ref's note:
    the run's outcome stands either way, and the history shows what is missing."""
    notes = []
    key = None
    key_file = os.environ.get(KEY_ENV)
    if not key_file:
        notes.append(f"unsigned: ${KEY_ENV} is not set (make a key with `handoff keygen`)")
    else:
        try:
            key = load_private_key(Path(key_file))
        except SigningKeyError as exc:
            notes.append(f"unsigned: {exc}")
    text = envelope(canonical(statement(spec, entry, fixes)), key).model_dump_json()
    name = bundle_key(entry)
    prefix = f"{entry['service']}."
    try:
        store_bundle(
            kube,
            spec.namespace,
            name,
            text,
            keep=lambda stored: not stored.startswith(prefix) or stored in kept,
        )
    except HandoffError as exc:
        notes.append(f"not stored: {exc}")
    return BundleRef(
        sha256=sha256_hex(text.encode()),
        configmap=f"{spec.namespace}/{BUNDLES_CONFIGMAP}",
        key=name,
        signed=key is not None,
        keyid=keyid(key.public_key()) if key is not None else None,
        note="; ".join(notes) or None,
    )


# Verification ---------------------------------------------------------------------------


class Check(BaseModel):
    what: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok    ' if self.ok else 'FAILED'}  {self.what}: {self.detail}"


def _signature(envelope: Envelope, body: bytes, public: Ed25519PublicKey | None) -> Check:
    what = "signature"
    if not envelope.signatures:
        return Check(what=what, ok=False, detail="the bundle is unsigned (see its note)")
    if public is None:
        return Check(
            what=what,
            ok=False,
            detail=f"no public key to check it with: pass --public-key FILE or set ${KEY_ENV}",
        )
    for signature in envelope.signatures:
        try:
            public.verify(_b64decode(signature.sig), pae(envelope.payloadType, body))
        except (InvalidSignature, ValueError):
            continue
        return Check(what=what, ok=True, detail=f"Ed25519 over the DSSE PAE, key {keyid(public)}")
    signers = ", ".join(s.keyid or "?" for s in envelope.signatures)
    return Check(
        what=what,
        ok=False,
        detail=f"no signature verifies with key {keyid(public)} (signed by {signers}): "
        "the bundle was changed after signing, or this is not the key that signed it",
    )


def _subject_runs(kube: Kube, entry: dict[str, Any], subjects: list[dict[str, Any]]) -> Check:
    """The pods the Service routes to run the subject: its image digest, its revision."""

    what = "subject still served"
    outcome = entry.get("outcome")
    if outcome != "done":
        return Check(what=what, ok=True, detail=f"not checked: the handoff ended {outcome}")
    digests = [s["digest"]["sha256"] for s in subjects if "sha256" in s.get("digest", {})]
    revisions = [s["digest"][REVISION_LABEL] for s in subjects if REVISION_LABEL in s["digest"]]
    if not digests or not revisions:
        return Check(what=what, ok=False, detail="the statement names no image digest and revision")
    digest, revision = digests[0], revisions[0]
    namespace, name = entry["namespace"], entry["service"]
    service = read_service(kube, namespace, name)
    ready = [p for p in pods_and_images(kube, namespace, service.selector) if p.ready]
    if not ready:
        return Check(
            what=what,
            ok=False,
            detail=f"Service {namespace}/{name} (selector {service.selector}) routes to no "
            f"ready pod; expected pods at revision {revision} running sha256:{digest}",
        )
    wrong = [
        f"{p.name} (revision {p.labels.get(REVISION_LABEL, '-')}, runs "
        f"{', '.join(p.image_ids or p.images)})"
        for p in ready
        if p.labels.get(REVISION_LABEL) != revision
        or not any(i.endswith(f"@sha256:{digest}") for i in (p.image_ids or p.images))
    ]
    if wrong:
        return Check(
            what=what,
            ok=False,
            detail=f"Service {namespace}/{name} routes to pods not at revision {revision} "
            f"with sha256:{digest}: {'; '.join(wrong)}",
        )
    return Check(
        what=what,
        ok=True,
        detail=f"{len(ready)} ready pod(s) of Service {namespace}/{name} at revision "
        f"{revision} run sha256:{digest[:12]}…",
    )


def verify(kube: Kube, entry: dict[str, Any], public: Ed25519PublicKey | None) -> list[Check]:
    """Every check of a history entry's bundle, in order; a failed read ends the list."""
    handoff = entry.get("handoff_id", "?")
    raw_ref = entry.get("evidence_bundle")
    if not raw_ref:
        detail = f"handoff {handoff}'s history entry names no evidence bundle"
        return [Check(what="bundle recorded", ok=False, detail=detail)]
    ref = BundleRef.model_validate(raw_ref)
    checks = [Check(what="bundle recorded", ok=True, detail=f"{ref.configmap} key {ref.key}")]
    text = read_bundles(kube, entry["namespace"]).get(ref.key)
    if text is None:
        detail = f"ConfigMap {ref.configmap} has no key {ref.key}" + (
            f" ({ref.note})" if ref.note else ""
        )
        return [*checks, Check(what="bundle stored", ok=False, detail=detail)]
    found = sha256_hex(text.encode())
    checks.append(
        Check(
            what="digest",
            ok=found == ref.sha256,
            detail=f"sha256 {found} "
            + ("matches the history entry" if found == ref.sha256 else f"!= {ref.sha256} recorded"),
        )
    )
    try:
        envelope = Envelope.model_validate_json(text)
        body = envelope.body()
        parsed = json.loads(body)
    except (ValidationError, ValueError) as exc:
        return [*checks, Check(what="envelope", ok=False, detail=f"not a DSSE envelope: {exc}")]
    checks.append(_signature(envelope, body, public))
    named = (parsed.get("predicate") or {}).get("handoff", {}).get("handoff_id")
    well_formed = (
        envelope.payloadType == PAYLOAD_TYPE
        and parsed.get("_type") == STATEMENT_TYPE
        and parsed.get("predicateType") == PREDICATE_TYPE
        and named == handoff
    )
    checks.append(
        Check(
            what="statement",
            ok=well_formed,
            detail=f"{parsed.get('_type')} of handoff {named}, "
            f"predicate {parsed.get('predicateType')}"
            + ("" if well_formed else f"; expected {STATEMENT_TYPE} of handoff {handoff}"),
        )
    )
    try:
        checks.append(_subject_runs(kube, entry, list(parsed.get("subject") or [])))
    except HandoffError as exc:
        checks.append(Check(what="subject still served", ok=False, detail=str(exc)))
    return checks
