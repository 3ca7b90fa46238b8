"""The evidence bundle's encoding against the DSSE specification's own test vector, and
its Ed25519 signature over that encoding (flows/report/attest.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from flows.report.attest import (
    PAYLOAD_TYPE,
    Envelope,
    SigningKeyError,
    _signature,
    canonical,
    envelope,
    keygen,
    load_private_key,
    load_public_key,
    pae,
)

# github.com/secure-systems-lab/dsse, protocol.md, "Test Vectors" (DSSE v1.0.0).
SPEC_TYPE = "http://example.com/HelloWorld"
SPEC_PAE = b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
SPEC_ENVELOPE = {
    "payload": "aGVsbG8gd29ybGQ=",
    "payloadType": SPEC_TYPE,
    "signatures": [
        {
            "sig": "A3JqsQGtVsJ2O2xqrI5IcnXip5GToJ3F+FnZ+O88SjtR6rDAa"
            "jabZKciJTfUiHqJPcIAriEGAHTVeCUjW2JIZA=="
        }
    ],
}
SPEC_X = 46950820868899156662930047687818585632848591499744589407958293238635476079160
SPEC_Y = 5640078356564379163099075877009565129882514886557779369047442380624545832820


def test_pae_is_the_specifications_vector() -> None:
    assert pae(SPEC_TYPE, b"hello world") == SPEC_PAE
    # lengths count bytes, not characters
    assert pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"


def test_the_specifications_envelope_verifies_over_this_pae() -> None:
    """The reference signature (ECDSA P-256, r||s) is over exactly the bytes pae() makes."""
    parsed = Envelope.model_validate(SPEC_ENVELOPE)
    assert parsed.body() == b"hello world"
    raw = base64.b64decode(parsed.signatures[0].sig)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public = ec.EllipticCurvePublicNumbers(SPEC_X, SPEC_Y, ec.SECP256R1()).public_key()
    public.verify(der, pae(parsed.payloadType, parsed.body()), ec.ECDSA(hashes.SHA256()))


def test_ed25519_envelope_verifies_and_a_changed_one_does_not(tmp_path: Path) -> None:
    public_file = keygen(tmp_path / "signing.key")
    key = load_private_key(tmp_path / "signing.key")
    assert (tmp_path / "signing.key").stat().st_mode & 0o777 == 0o600
    body = canonical({"b": 1, "a": [1, 2]})
    assert body == b'{"a":[1,2],"b":1}'
    signed = envelope(body, key)
    assert signed.payloadType == PAYLOAD_TYPE and signed.signatures[0].keyid.startswith("ed25519:")
    public = load_public_key(public_file)
    assert _signature(signed, signed.body(), public).ok
    # the public half of the private key file is the same key
    assert _signature(signed, signed.body(), load_public_key(tmp_path / "signing.key")).ok
    # URL-safe base64 is accepted, as DSSE requires of verifiers
    urlsafe = signed.model_copy(
        update={"payload": base64.urlsafe_b64encode(body).decode().rstrip("=")}
    )
    assert urlsafe.body() == body
    changed = canonical({"b": 2, "a": [1, 2]})
    assert not _signature(signed, changed, public).ok
    other = load_public_key(keygen(tmp_path / "other.key"))
    assert not _signature(signed, body, other).ok
    assert not _signature(envelope(body, None), body, public).ok
    assert json.loads(base64.b64decode(signed.payload)) == {"a": [1, 2], "b": 1}


def test_a_key_that_is_not_ed25519_is_named(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    ecdsa = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "ecdsa.key"
    path.write_bytes(
        ecdsa.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(SigningKeyError, match=r"ecdsa.key: expected an Ed25519 key"):
        load_private_key(path)
    with pytest.raises(SigningKeyError, match="could not read it"):
        load_private_key(tmp_path / "missing.key")
    with pytest.raises(FileExistsError):
        keygen(path)  # an existing key is never overwritten
