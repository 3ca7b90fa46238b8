"""Handoff specs: the seeds' specs load; bad input is refused with the file and field
named; the environment fills ${VAR}s and image overrides; the sandbox's simulated
candle-vllm repository carries the fix commit the clef-candle spec requires."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.render import compute_revision, load_manifest, render_candidate, service_selector
from flows.spec import SpecError, load_spec
from sandbox.srcrepo import create_candle_vllm_repo

SPECS = Path(__file__).resolve().parents[2] / "manifests" / "handoffs"


def test_seed_specs_load() -> None:
    clef = load_spec(SPECS / "clef-candle.yaml")
    coder = load_spec(SPECS / "coder-14b-fp16.yaml")
    assert (clef.service, clef.replaces_live, clef.candidate.manifest.is_file()) == (
        "clef-serve",
        False,
        True,
    )
    assert coder.replaces_live and coder.current == ["candle-vllm"]
    assert clef.gates.parity is not None and clef.gates.parity.golden.name == "clef-flash.json"


def test_the_coder_spec_gates_the_model_change_on_its_task_suite() -> None:
    from gates.task.golden import load_task_golden
    from gates.task.suite import load_suite

    task = load_spec(SPECS / "coder-14b-fp16.yaml").gates.task
    assert task is not None and task.golden is not None
    suite, golden = load_suite(task.suite), load_task_golden(task.golden)
    # the golden scores hold only for the suite they were recorded with
    assert golden.suite_digest == suite.digest()
    kinds = {case.check.kind for case in suite.cases}
    assert {"code", "json", "number"} <= kinds


def test_fix_commit_in_spec_is_the_sandbox_repos(tmp_path: Path) -> None:
    repo = create_candle_vllm_repo(tmp_path / "candle-vllm")
    assert load_spec(SPECS / "clef-candle.yaml").image.requires == [repo.commits["fix"]]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_invalid_field_is_named_with_the_file(tmp_path: Path) -> None:
    text = (
        (SPECS / "clef-candle.yaml")
        .read_text()
        .replace("preview_replicas: 1", "preview_replicas: zero")
    )
    path = _write(tmp_path, text.replace("../", str(SPECS.parent) + "/"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(path) in str(info.value) and "candidate.preview_replicas" in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: [unclosed", "not valid YAML"),
        ("- a list", "expected a mapping"),
        ("name: x\nsurprise: 1\n", "surprise"),
    ],
)
def test_malformed_specs(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_spec(_write(tmp_path, text))


def test_unset_variable_without_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HANDOFF_SPEC_NO_SUCH_VAR", raising=False)
    text = (
        (SPECS / "clef-candle.yaml")
        .read_text()
        .replace(
            "${CANDLE_VLLM_SOURCE:-https://forgejo.riotpiao.com/riotpiao-poimen/candle-vllm.git}",
            "${HANDOFF_SPEC_NO_SUCH_VAR}",
        )
    )
    with pytest.raises(SpecError, match=r"\$\{HANDOFF_SPEC_NO_SUCH_VAR\} is not set"):
        load_spec(_write(tmp_path, text))


def test_image_overrides_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "HANDOFF_IMAGES",
        "forgejo.riotpiao.com/riotpiao-poimen/candle-vllm=127.0.0.1:5000/riotpiao-poimen/candle-vllm",
    )
    spec = load_spec(SPECS / "clef-candle.yaml")
    assert spec.resolve_image(spec.image.repository) == "127.0.0.1:5000/riotpiao-poimen/candle-vllm"
    manifest = load_manifest(spec)
    pinned = "127.0.0.1:5000/riotpiao-poimen/candle-vllm@sha256:" + "a" * 64
    revision = compute_revision(spec, manifest, pinned)
    body = render_candidate(
        spec, manifest, pinned=pinned, revision=revision, replicas=0, handoff_id="h1"
    )
    assert body["spec"]["replicas"] == 0
    assert body["spec"]["template"]["spec"]["containers"][0]["image"] == pinned
    assert body["spec"]["template"]["metadata"]["labels"]["handoff.dev/revision"] == revision
    assert service_selector(manifest, revision) == {
        "app": "clef-candle",
        "handoff.dev/revision": revision,
    }
    assert compute_revision(spec, manifest, pinned) == revision  # a rerun computes the same


def test_bad_image_override_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANDOFF_IMAGES", "no-equals-sign")
    with pytest.raises(SpecError, match="expected name=newName"):
        load_spec(SPECS / "clef-candle.yaml")
