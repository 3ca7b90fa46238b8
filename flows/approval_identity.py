"""Who approved, proven: an approval answer signed with its approver's Ed25519 key.

Prefect OSS has no user identity: whoever holds its credentials can type any name into
the approval form or `handoff approve --approver`. A spec that lists its approvers
(`approval.approvers`: name → public key file in the spec's repository) takes an
approval only when it is signed with the key of the name it carries. The signature covers
the flow run, the pause, the decision, the name and the reason, so it cannot be replayed
to another run, another pause or another answer. A spec without approvers keeps typed
names, and the record says they were not verified.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from pydantic import BaseModel

from flows.report.attest import canonical, keyid, load_private_key, load_public_key

DOMAIN = "handoff-approval-v1"  # a signature made for anything else never verifies here


class Answer(BaseModel):
    """What an approval signature covers."""

    flow_run: str
    pause: str
    decision: str
    approver: str
    reason: str

    def message(self) -> bytes:
        return canonical({"domain": DOMAIN, **self.model_dump()})


class Identity(BaseModel):
    """How the approver's name was established, as the record keeps it."""

    verified: bool
    how: str


def sign_answer(key_file: Path, answer: Answer) -> str:
    """The answer's signature (base64) with the approver's private key."""
    return base64.b64encode(load_private_key(key_file).sign(answer.message())).decode()


def establish(approvers: dict[str, Path], answer: Answer, signature: str) -> Identity:
    """Whether `answer` was signed by the key the spec lists for its approver."""
    if not approvers:
        how = "typed name, not verified (the spec lists no approvers)"
        return Identity(verified=False, how=how + (", signature ignored" if signature else ""))
    listed = ", ".join(sorted(approvers))
    public_file = approvers.get(answer.approver)
    if public_file is None:
        return Identity(
            verified=False, how=f"{answer.approver!r} is not an approver the spec lists ({listed})"
        )
    if not signature:
        return Identity(
            verified=False,
            how=f"unsigned: the spec takes approvals only signed by its approvers ({listed}); "
            f"answer with `handoff approve RUN_ID --approver {answer.approver} --key FILE`",
        )
    public = load_public_key(public_file)
    try:
        public.verify(base64.b64decode(signature, validate=True), answer.message())
    except (InvalidSignature, binascii.Error, ValueError):
        return Identity(
            verified=False,
            how=f"the signature is not {answer.approver}'s key {keyid(public)} over this "
            "run, pause and answer",
        )
    return Identity(verified=True, how=f"signed with {answer.approver}'s key {keyid(public)}")
