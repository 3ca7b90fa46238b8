"""Signature checks: a body is accepted only when every signature header present is the
HMAC-SHA256 of exactly that body under the secret, in the forge's own format."""

from __future__ import annotations

import pytest

from flows.webhook.signature import check_signature, sign

SECRET = b"s3cret"
BODY = b'{"ref": "refs/heads/main"}'
GOOD = sign(SECRET, BODY)


@pytest.mark.parametrize(
    ("headers", "accepted"),
    [
        ({"x-forgejo-signature": GOOD}, True),
        ({"x-gitea-signature": GOOD}, True),
        ({"x-hub-signature-256": f"sha256={GOOD}"}, True),
        ({"x-forgejo-signature": GOOD.upper()}, True),
        ({"x-forgejo-signature": GOOD, "x-gitea-signature": GOOD}, True),
        ({}, False),
        ({"x-forgejo-signature": sign(b"other", BODY)}, False),
        ({"x-forgejo-signature": sign(SECRET, BODY + b" ")}, False),
        ({"x-hub-signature-256": GOOD}, False),  # GitHub's header needs its prefix
        ({"x-forgejo-signature": f"sha256={GOOD}"}, False),  # Forgejo's is bare hex
        ({"x-forgejo-signature": GOOD, "x-gitea-signature": "0" * 64}, False),
        ({"x-forgejo-signature": "ä" * 64}, False),
        ({"x-forgejo-signature": ""}, False),
    ],
)
def test_signature_headers(headers: dict[str, str], accepted: bool) -> None:
    refused = check_signature(SECRET, BODY, headers)
    assert (refused is None) is accepted, refused


def test_a_refusal_says_why_and_what_to_do() -> None:
    assert "set the webhook's secret" in (check_signature(SECRET, BODY, {}) or "")
    wrong = check_signature(SECRET, BODY, {"x-gitea-signature": "0" * 64}) or ""
    assert "x-gitea-signature" in wrong and "wrong secret" in wrong
