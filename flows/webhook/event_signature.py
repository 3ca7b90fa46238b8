"""Merge events the relay signs, and the check that refuses any other.

Anyone with the Prefect credentials can post a `handoff.merge` event, or start a run of
the deployment with a trigger of their own, naming any commit the repository holds. With
a key pair (`handoff keygen`), the relay (and the reconciler) sign what a run takes from
the event (the spec file and the trigger's source, delivery, merge commit, repository
and merge time, which orders merges) with the private key ($HANDOFF_EVENT_KEY_FILE, or
the relay's --event-key); the flow's side ($HANDOFF_EVENT_PUBLIC_KEY_FILE, set on the
worker) refuses a trigger that names a merge commit without a signature of that key,
before the commit is cloned (the deployments' pull step, flows/checkout.py, runs in the
worker's environment or the flow image, not the commit's) and again when the flow
starts. Runs that name no commit hand off the
branch's head and need none. The newest check (flows/newest.py) counts only merge events
that verify, so an event of a Prefect user's own, dated later, cannot supersede the
relay's merge.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from flows.errors import PermanentError
from flows.report.attest import canonical, load_private_key, load_public_key, pae

DOMAIN = "handoff-merge-event-v2"
SIGNED = ("spec_file", "source", "delivery_id", "merge_commit", "repository", "merged_at")
KEY_ENV = "HANDOFF_EVENT_KEY_FILE"
PUBLIC_KEY_ENV = "HANDOFF_EVENT_PUBLIC_KEY_FILE"
# Where a worker host keeps the key, and the Kubernetes pool's template mounts the
# ConfigMap handoff-merge-event-key: a path no job variable can change.
FIXED_PUBLIC_KEY = Path("/etc/handoff/merge-event/key.pub")


class UnsignedTrigger(PermanentError):
    """A run's trigger names a merge commit the relay did not sign."""


def _message(values: Mapping[str, Any]) -> bytes:
    signed = {k: (values.get(k) or None) for k in SIGNED}
    signed["merged_at"] = _instant(signed["merged_at"])
    return pae(DOMAIN, canonical(signed))


def _instant(value: object) -> str | None:
    """One text per instant, whether it comes as the payload's JSON, a datetime, or the
    trigger's rendering of it (which writes a missing time as "None"); ValueError else."""
    if value is None or value == "None":
        return None
    at = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    return (at.astimezone(dt.UTC) if at.tzinfo else at).isoformat()


def verifies(values: Mapping[str, Any], signature: str, public: Ed25519PublicKey) -> bool:
    """Whether `signature` is the key's over `values` (a merge event's payload)."""
    try:
        public.verify(base64.b64decode(signature, validate=True), _message(values))
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def public_key_file() -> Path | None:
    """The relay's public key the flow's side checks with, if one is configured: the file
    at FIXED_PUBLIC_KEY when it exists (a run's env cannot unset or redirect it), else
    $HANDOFF_EVENT_PUBLIC_KEY_FILE."""
    if FIXED_PUBLIC_KEY.is_file():
        return FIXED_PUBLIC_KEY
    where = os.environ.get(PUBLIC_KEY_ENV)
    return Path(where) if where else None


def sign_event(values: Mapping[str, Any], key: Ed25519PrivateKey) -> str:
    """The base64 signature of the fields a run takes from a merge event."""
    return base64.b64encode(key.sign(_message(values))).decode()


def signing_key(path: Path | None = None) -> Ed25519PrivateKey | None:
    """The relay's key: `path`, else $HANDOFF_EVENT_KEY_FILE, else none (unsigned)."""
    where = path or (Path(os.environ[KEY_ENV]) if os.environ.get(KEY_ENV) else None)
    return load_private_key(where) if where else None


def check_trigger(spec_file: str, trigger: Mapping[str, Any] | None) -> str:
    """'' when nothing is to be checked (no key configured, or no merge commit named),
    'signed' when the relay's signature verifies; UnsignedTrigger otherwise."""
    where = public_key_file()
    if not where or not trigger or not trigger.get("merge_commit"):
        return ""
    values = {**trigger, "spec_file": spec_file}
    signature = str(trigger.get("signature") or "")
    about = (
        f"the trigger of this run (merge {str(trigger.get('merge_commit'))[:12]} of "
        f"{trigger.get('repository')}, delivery {trigger.get('delivery_id')}, spec {spec_file})"
    )
    if not signature:
        raise UnsignedTrigger(
            f"{about} carries no relay signature, and ${PUBLIC_KEY_ENV} requires one: only "
            "the relay's merge events may name a commit. Start a run by hand without a "
            "merge commit (`handoff run`) to hand off the branch's head"
        )
    if not verifies(values, signature, load_public_key(where)):
        raise UnsignedTrigger(
            f"{about}: its signature does not verify with {where}: the event was not sent "
            "by the relay, or was changed after it signed"
        )
    return "signed"
