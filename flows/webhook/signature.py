"""HMAC-SHA256 signatures of webhook bodies, as Forgejo, Gitea and GitHub send them.

Forgejo/Gitea put the bare hex digest in `X-Forgejo-Signature` / `X-Gitea-Signature`;
GitHub (and Gitea/Forgejo for compatibility) put `sha256=<hex>` in
`X-Hub-Signature-256`. Every signature header present must match, and each may be
given once: a body is never accepted on the strength of one value while another
disagrees. The comparison is
constant-time (`hmac.compare_digest`) so response timing leaks nothing of the digest.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from flows.webhook.payload import repeated

# header name (lower case) → prefix before the hex digest
SIGNATURE_HEADERS: dict[str, str] = {
    "x-hub-signature-256": "sha256=",
    "x-forgejo-signature": "",
    "x-gitea-signature": "",
}


def sign(secret: bytes, body: bytes) -> str:
    """The bare hex HMAC-SHA256 of body (what Forgejo/Gitea send)."""
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def check_signature(secret: bytes, body: bytes, headers: Mapping[str, str]) -> str | None:
    """None when the body is signed with secret; otherwise why it is refused."""
    twice = repeated(headers.items(), SIGNATURE_HEADERS)
    if twice:
        return (
            f"{', '.join(twice)} given more than once: a body is checked against exactly one "
            "value of each signature header"
        )
    present = {name: headers[name] for name in SIGNATURE_HEADERS if name in headers}
    if not present:
        return (
            "no signature header (expected one of X-Forgejo-Signature, X-Gitea-Signature, "
            "X-Hub-Signature-256): set the webhook's secret in the forge"
        )
    expected = sign(secret, body)
    for name, value in present.items():
        prefix = SIGNATURE_HEADERS[name]
        given = value.strip()
        if not given.startswith(prefix):
            return f"{name}: expected {prefix or 'a bare hex digest'}…, got a different format"
        digest = given.removeprefix(prefix).lower().encode("utf-8", "replace")
        if not hmac.compare_digest(digest, expected.encode()):
            return f"{name} does not match the body: wrong secret, or the body was altered"
    return None
