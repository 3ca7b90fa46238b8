"""An approval's name is proven by a signature over exactly this run, pause and answer,
with the key the spec lists for that name; anything else is not verified."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.approval_identity import Answer, establish, sign_answer
from flows.report.attest import keygen
from flows.spec import SpecError, load_spec
from tests.world import spec_in

ANSWER = Answer(
    flow_run="0b6c1a52-0000-4000-8000-000000000001",
    pause="approve-the-in-place-plan",
    decision="approve",
    approver="alice",
    reason="window agreed",
)


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """name → (private key file, public key file), made as `handoff keygen` makes them."""
    made = {}
    for name in ("alice", "mallory"):
        private = tmp_path / f"{name}.key"
        made[name] = (private, keygen(private))
    return made


def test_a_signature_by_the_listed_key_over_this_answer_verifies(
    keys: dict[str, tuple[Path, Path]],
) -> None:
    approvers = {"alice": keys["alice"][1]}
    identity = establish(approvers, ANSWER, sign_answer(keys["alice"][0], ANSWER))
    assert identity.verified and identity.how.startswith("signed with alice's key ed25519:")


@pytest.mark.parametrize(
    "changed",
    [
        {"flow_run": "0b6c1a52-0000-4000-8000-000000000002"},
        {"pause": "approve-the-handoff-after-the-gates"},
        {"decision": "reject"},
        {"reason": "something else"},
    ],
)
def test_a_signature_never_carries_over_to_another_run_pause_or_answer(
    keys: dict[str, tuple[Path, Path]], changed: dict[str, str]
) -> None:
    signature = sign_answer(keys["alice"][0], ANSWER)
    identity = establish({"alice": keys["alice"][1]}, ANSWER.model_copy(update=changed), signature)
    assert not identity.verified and "is not alice's key" in identity.how


def test_anyone_else_is_not_verified(keys: dict[str, tuple[Path, Path]]) -> None:
    approvers = {"alice": keys["alice"][1]}
    forged = sign_answer(keys["mallory"][0], ANSWER)
    assert not establish(approvers, ANSWER, forged).verified
    assert "unsigned" in establish(approvers, ANSWER, "").how
    assert not establish(approvers, ANSWER, "not base64!").verified
    as_mallory = ANSWER.model_copy(update={"approver": "mallory"})
    signed = sign_answer(keys["mallory"][0], as_mallory)
    assert "not an approver the spec lists (alice)" in establish(approvers, as_mallory, signed).how
    typed = establish({}, ANSWER, "")
    assert not typed.verified and "typed name, not verified" in typed.how


def test_a_spec_names_approver_keys_only_in_its_own_tree(
    keys: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    inside = tmp_path / "spec"
    inside.mkdir()
    spec_file = spec_in("llm-test", "clef-candle", inside, approval={"approvers": {}})
    (inside / "alice.pub").write_bytes(keys["alice"][1].read_bytes())
    text = spec_file.read_text().replace("approvers: {}", "approvers:\n    alice: alice.pub")
    spec_file.write_text(text)
    assert load_spec(spec_file).approval.approvers == {"alice": (inside / "alice.pub").resolve()}
    spec_file.write_text(text.replace("alice.pub", str(outside / "alice.pub")))
    with pytest.raises(SpecError, match=r"approval\.approvers\.alice: .* outside"):
        load_spec(spec_file)
