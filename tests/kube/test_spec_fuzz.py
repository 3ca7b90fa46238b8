"""Specs a person could get wrong, generated: every invalid spec is refused with an error
naming the field (as a dotted path), and `handoff run` of one writes nothing to the
cluster (checked on a real control plane for a sample)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flows.kube.client import Kube
from flows.spec import SpecError, load_spec
from sandbox import controlplane
from tests.lease.test_lease import SERVICE

NOT_SCALAR = st.one_of(
    st.lists(st.integers(), min_size=1, max_size=3),
    st.dictionaries(st.text(min_size=1, max_size=5), st.integers(), min_size=1, max_size=2),
)
NOT_POSITIVE = st.one_of(st.integers(max_value=0), st.floats(max_value=0, allow_nan=False))
BAD_NAME = st.one_of(
    st.sampled_from(["", "-a", "a-", "UPPER", "with space", "under_score", "dot.ted"]),
    st.text(min_size=1, max_size=8).filter(lambda s: not s.isascii() or not s.isalnum()),
)
# field (dotted, as the error names it) → values that field never accepts
INVALID: dict[str, st.SearchStrategy[Any]] = {
    "name": st.one_of(BAD_NAME, NOT_SCALAR, st.integers()),
    "namespace": st.one_of(NOT_SCALAR, st.integers(), st.none()),
    "service": st.one_of(NOT_SCALAR, st.integers(), st.none()),
    "current": st.one_of(
        st.just([]), st.just(["old", "old"]), st.integers(), st.lists(NOT_SCALAR, min_size=1)
    ),
    "candidate.deployment": st.one_of(NOT_SCALAR, st.none()),
    "candidate.port": st.one_of(NOT_SCALAR, st.text(alphabet="xyz", min_size=1)),
    "candidate.replicas": st.one_of(st.integers(max_value=0), NOT_SCALAR),
    "candidate.preview_replicas": st.one_of(st.integers(max_value=0), NOT_SCALAR),
    "candidate.capacity_wait_s": st.one_of(st.floats(max_value=-1e-6, allow_nan=False), NOT_SCALAR),
    "image.tag": st.one_of(NOT_SCALAR, st.none()),
    "image.requires": st.one_of(st.integers(), st.lists(NOT_SCALAR, min_size=1)),
    "image.timeout_s": st.one_of(NOT_POSITIVE, NOT_SCALAR),
    "image.poll_interval_s": st.one_of(NOT_POSITIVE, NOT_SCALAR),
    "gates.model_id": st.one_of(NOT_SCALAR, st.none()),
    "approval.required": NOT_SCALAR,
    "approval.timeout_s": NOT_POSITIVE,
    "approval.outage_timeout_s": st.one_of(
        NOT_POSITIVE, st.floats(min_value=900.001, max_value=1e9)
    ),
    "notify.block": st.sampled_from(["slack", "Custom/x", "a/b/c", "/x", "x/"]),
}
REQUIRED = ["name", "namespace", "service", "current", "candidate", "candidate.manifest",
            "candidate.deployment", "candidate.container", "image", "image.repository",
            "image.tag", "image.source", "gates", "gates.model_id"]  # fmt: skip


def valid_spec(namespace: str = "ns", service: str = "svc") -> dict[str, Any]:
    return {
        "name": "fuzzed",
        "namespace": namespace,
        "service": service,
        "current": ["old"],
        "candidate": {"manifest": "cand.yaml", "deployment": "cand", "container": "server"},
        "image": {"repository": "r.invalid/s", "tag": "v1", "source": "/nonexistent"},
        "gates": {"model_id": "m"},
        "approval": {"required": True},
        "notify": {"block": "custom-webhook/approvers"},
    }


def _set(spec: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = spec
    for key in parents:
        node = node[key]
    node[last] = value


def _delete(spec: dict[str, Any], path: str) -> None:
    *parents, last = path.split(".")
    node = spec
    for key in parents:
        node = node[key]
    del node[last]


@st.composite
def invalid_specs(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """(a spec with one thing wrong, the field its error must name)."""
    spec = valid_spec()
    how = draw(st.sampled_from(["value", "missing", "unknown", "unset-variable"]))
    if how == "value":
        field = draw(st.sampled_from(sorted(INVALID)))
        _set(spec, field, draw(INVALID[field]))
    elif how == "missing":
        field = draw(st.sampled_from(REQUIRED))
        _delete(spec, field)
    elif how == "unknown":
        parent = draw(st.sampled_from(["", "candidate.", "image.", "gates.", "approval."]))
        key = draw(st.from_regex(r"\Azz[a-z_]{0,8}\Z"))
        field = parent + key
        _set(spec, field, draw(st.one_of(st.integers(), st.text(max_size=5))))
    else:
        field = draw(st.sampled_from(["namespace", "service", "image.tag", "gates.model_id"]))
        _set(spec, field, "${HANDOFF_FUZZ_NEVER_SET}")
    return spec, field


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=invalid_specs())
def test_every_invalid_spec_is_refused_naming_the_field(
    case: tuple[dict[str, Any], str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    spec, field = case
    path = tmp_path_factory.mktemp("spec") / "fuzzed.yaml"
    path.write_text(yaml.safe_dump(copy.deepcopy(spec), allow_unicode=True))
    os.environ.pop("HANDOFF_FUZZ_NEVER_SET", None)
    with pytest.raises(SpecError) as refused:
        load_spec(path)
    message = str(refused.value)
    assert str(path) in message, message
    assert field in message, f"{field} not named: {message}"


SAMPLE = [("candidate.replicas", 0), ("current", []), ("image.timeout_s", -1),
          ("notify.block", "slack"), ("name", "Bad_Name")]  # fmt: skip


def test_handoff_run_of_invalid_specs_writes_nothing(
    plane: controlplane.ControlPlane, admin: Kube, ns: str, tmp_path: Path
) -> None:
    before = admin.core.read_namespaced_service(SERVICE, ns).metadata.resource_version
    for field, value in SAMPLE:
        spec = valid_spec(ns, SERVICE)
        _set(spec, field, value)
        path = tmp_path / f"{field}.yaml"
        path.write_text(yaml.safe_dump(spec))
        result = subprocess.run(
            [sys.executable, "-m", "cli", "run", str(path), "--auto-approve"],
            env={**os.environ, "KUBECONFIG": str(plane.kubeconfig)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        output = " ".join((result.stdout + result.stderr).split())
        assert result.returncode == 2, output
        assert field in output and "invalid handoff spec" in output, output
    assert admin.core.read_namespaced_service(SERVICE, ns).metadata.resource_version == before
    assert admin.apps.list_namespaced_deployment(ns).items == []
    assert admin.coordination.list_namespaced_lease(ns).items == []
    assert admin.core.list_namespaced_event(ns).items == []
