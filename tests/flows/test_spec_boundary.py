"""What a spec may reach: `${VAR}` reads only HANDOFF_SPEC_* variables and those the spec
lists under `environment:`, never a credential; namespace, Service and Deployment names
are Kubernetes names; every file a spec names lies inside the repository holding it."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flows.spec import SpecError, load_spec

SPECS = Path(__file__).resolve().parents[2] / "manifests" / "handoffs"
SECRET = "s3cr3t-value-never-published"


def _spec(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "bounded",
        "namespace": "ns",
        "service": "svc",
        "current": ["old"],
        "candidate": {"manifest": "cand.yaml", "deployment": "cand", "container": "server"},
        "image": {"repository": "r.invalid/s", "tag": "v1", "source": "/nonexistent"},
        "gates": {
            "model_id": "m",
            "parity": {"golden": "golden.json"},
            "task": {"suite": "suite.yaml", "golden": "scores.json"},
        },
    }
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = spec
        for key in parents:
            node = node[key]
        node[last] = value
    return spec


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository (a git work tree) with a specs directory; a file outside it."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "specs").mkdir()
    (root / "files").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text(SECRET)
    return root


def _write(where: Path, spec: dict[str, Any]) -> Path:
    path = where / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


# --- 1. ${VAR} only from the allow-list -----------------------------------------------------


def test_a_credential_in_the_environment_is_never_expanded(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANDOFF_WEBHOOK_SECRET", SECRET)
    path = _write(repo / "specs", _spec(service="${HANDOFF_WEBHOOK_SECRET}"))
    with pytest.raises(SpecError) as refused:
        load_spec(path)
    message = str(refused.value)
    assert SECRET not in message
    for part in (str(path), "service", "${HANDOFF_WEBHOOK_SECRET}", "credential"):
        assert part in message, (part, message)


def test_a_variable_neither_handoff_spec_nor_declared_is_refused(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOME_TAG", "v2")
    path = _write(repo / "specs", _spec(**{"image.tag": "${SOME_TAG}"}))
    with pytest.raises(SpecError) as refused:
        load_spec(path)
    message = str(refused.value)
    for part in (str(path), "image.tag", "${SOME_TAG}", "HANDOFF_SPEC_", "environment"):
        assert part in message, (part, message)


def test_a_default_does_not_let_a_refused_variable_through(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOME_TAG", raising=False)
    path = _write(repo / "specs", _spec(**{"image.tag": "${SOME_TAG:-v1}"}))
    with pytest.raises(SpecError, match=r"SOME_TAG"):
        load_spec(path)


def test_handoff_spec_variables_and_declared_ones_expand(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANDOFF_SPEC_TAG", "v2")
    monkeypatch.setenv("MODEL_SOURCE", "https://git.example/m.git")
    monkeypatch.delenv("HANDOFF_SPEC_UNSET", raising=False)
    spec = _spec(
        environment=["MODEL_SOURCE"],
        **{
            "image.tag": "${HANDOFF_SPEC_TAG}",
            "image.source": "${MODEL_SOURCE}",
            "gates.model_id": "${HANDOFF_SPEC_UNSET:-m}",
        },
    )
    loaded = load_spec(_write(repo / "specs", spec))
    assert (loaded.image.tag, loaded.image.source, loaded.gates.model_id) == (
        "v2",
        "https://git.example/m.git",
        "m",
    )
    assert loaded.environment == ["MODEL_SOURCE"]


@pytest.mark.parametrize(
    "name",
    [
        "HANDOFF_WEBHOOK_SECRET",
        "PREFECT_API_AUTH_STRING",
        "PREFECT_API_KEY",
        "HANDOFF_REGISTRY_PASSWORD",
        "HANDOFF_REGISTRY_TOKEN",
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "HANDOFF_SPEC_API_KEY",
        "HANDOFF_SPEC_DB_PASSWORD",
        "HANDOFF_SPEC_SECRET",
    ],
)
def test_a_credential_is_refused_even_when_declared(
    repo: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, SECRET)
    path = _write(repo / "specs", _spec(environment=[name], **{"image.tag": f"${{{name}}}"}))
    with pytest.raises(SpecError) as refused:
        load_spec(path)
    message = str(refused.value)
    assert SECRET not in message
    assert str(path) in message and name in message and "credential" in message, message


@pytest.mark.parametrize("declared", ["${HANDOFF_SPEC_X}", "lower-case-dash", 3, {"a": 1}])
def test_the_declared_list_holds_variable_names(repo: Path, declared: Any) -> None:
    with pytest.raises(SpecError, match=r"environment"):
        load_spec(_write(repo / "specs", _spec(environment=[declared])))


def test_the_seed_specs_read_only_what_they_declare(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GDN_FIX_COMMIT", "f" * 40)
    monkeypatch.setenv("IMAGE_POLL_INTERVAL_S", "2")
    clef = load_spec(SPECS / "clef-candle.yaml")
    assert clef.image.requires == ["f" * 40] and clef.image.poll_interval_s == 2
    for seed in SPECS.glob("*.yaml"):
        text = seed.read_text()
        declared = set(yaml.safe_load(text).get("environment") or [])
        for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text):
            assert name.startswith("HANDOFF_SPEC_") or name in declared, (seed.name, name)


# --- 2. Kubernetes names --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("namespace", "Llm-Serving"),
        ("namespace", "llm_serving"),
        ("namespace", "-llm"),
        ("namespace", "llm-"),
        ("namespace", "a" * 64),
        ("namespace", "llm.serving"),
        ("namespace", ""),
        ("service", "Clef"),
        ("service", "clef serve"),
        ("service", "a" * 64),
        ("service", "clef/serve"),
        ("service", "1clef"),
        ("candidate.deployment", "Cand"),
        ("candidate.deployment", "cand..x"),
        ("candidate.deployment", "a" * 254),
        ("candidate.deployment", "cand_x"),
        ("current", ["old", "Old_2"]),
        ("current", [".old"]),
    ],
)
def test_names_that_kubernetes_would_refuse_are_refused(repo: Path, field: str, value: Any) -> None:
    path = _write(repo / "specs", _spec(**{field: value}))
    with pytest.raises(SpecError) as refused:
        load_spec(path)
    message = str(refused.value)
    assert str(path) in message and field in message and "DNS-1" in message, message


def test_names_at_their_limits_load(repo: Path) -> None:
    spec = _spec(
        namespace="a" * 63,
        service="s" + "0" * 62,
        current=["old.v1", "b" * 253],
        **{"candidate.deployment": "cand-1.x"},
    )
    loaded = load_spec(_write(repo / "specs", spec))
    assert loaded.namespace == "a" * 63 and loaded.current == ["old.v1", "b" * 253]


# --- 3. files only inside the repository holding the spec -----------------------------------

PATH_FIELDS = ["candidate.manifest", "gates.parity.golden", "gates.task.suite", "gates.task.golden"]


@pytest.mark.parametrize("field", PATH_FIELDS)
def test_an_absolute_path_outside_the_repository_is_refused(repo: Path, field: str) -> None:
    outside = repo.parent / "outside" / "secret.txt"
    path = _write(repo / "specs", _spec(**{field: str(outside)}))
    with pytest.raises(SpecError) as refused:
        load_spec(path)
    message = str(refused.value)
    assert str(path) in message and field in message and str(repo) in message, message
    assert SECRET not in message


@pytest.mark.parametrize("field", PATH_FIELDS)
def test_a_parent_escape_is_refused(repo: Path, field: str) -> None:
    path = _write(repo / "specs", _spec(**{field: "../../outside/secret.txt"}))
    with pytest.raises(SpecError, match=re.escape(field)):
        load_spec(path)


def test_a_symlink_out_of_the_repository_is_refused(repo: Path) -> None:
    (repo / "files" / "golden.json").symlink_to(repo.parent / "outside" / "secret.txt")
    path = _write(repo / "specs", _spec(**{"gates.parity.golden": "../files/golden.json"}))
    with pytest.raises(SpecError, match=r"gates\.parity\.golden"):
        load_spec(path)


def test_paths_inside_the_repository_load(repo: Path) -> None:
    spec = _spec(
        **{
            "candidate.manifest": "../files/cand.yaml",
            "gates.parity.golden": str(repo / "files" / "golden.json"),
            "gates.task.suite": "./suite.yaml",
        }
    )
    loaded = load_spec(_write(repo / "specs", spec))
    assert loaded.candidate.manifest == repo / "files" / "cand.yaml"
    assert loaded.gates.parity is not None
    assert loaded.gates.parity.golden == repo / "files" / "golden.json"


def test_a_spec_outside_any_repository_reaches_only_its_own_directory(tmp_path: Path) -> None:
    here = tmp_path / "alone"
    here.mkdir()
    (tmp_path / "beside.yaml").write_text("kind: Deployment\n")
    assert load_spec(_write(here, _spec())).candidate.manifest == here / "cand.yaml"
    with pytest.raises(SpecError, match=r"candidate\.manifest"):
        load_spec(_write(here, _spec(**{"candidate.manifest": "../beside.yaml"})))


def test_the_seed_specs_paths_stay_in_this_repository() -> None:
    root = SPECS.parents[1]
    for seed in SPECS.glob("*.yaml"):
        spec = load_spec(seed)
        named = [spec.candidate.manifest]
        if spec.gates.parity is not None:
            named.append(spec.gates.parity.golden)
        if spec.gates.task is not None:
            named += [spec.gates.task.suite, *filter(None, [spec.gates.task.golden])]
        assert all(p.is_relative_to(root) and p.is_file() for p in named), (seed, named)


# --- 4. no generated spec reaches outside ---------------------------------------------------

# Names a generated spec may try to read; every one is set in the environment to a marker.
NAMES = [
    "HANDOFF_SPEC_TAG",
    "HANDOFF_SPEC_SOURCE",
    "DECLARED_A",
    "UNDECLARED_B",
    "HOME",
    "HANDOFF_WEBHOOK_SECRET",
    "PREFECT_API_AUTH_STRING",
    "PREFECT_API_KEY",
    "HANDOFF_REGISTRY_PASSWORD",
    "HANDOFF_SPEC_TOKEN",
    "HANDOFF_SPEC_SIGNING_KEY",
    "HANDOFF_SPEC_SECRET",
    "MY_PASSWORD",
]
CREDENTIAL = re.compile(
    r"^(HANDOFF_WEBHOOK_SECRET|PREFECT_API_AUTH_STRING|PREFECT_API_KEY)$"
    r"|_(PASSWORD|TOKEN|SECRET|KEY)$"
)


def _marker(name: str) -> str:
    return f"val-{name.lower().replace('_', '-')}"


SEGMENTS = ["..", ".", "files", "specs", "link-out", "link-in", "outside", "repo", "x.yaml"]
RELATIVE = st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=6).map("/".join)
REFERENCE = st.one_of(
    st.just(""),
    st.sampled_from(sorted(NAMES)).map(lambda n: f"${{{n}}}"),
)


@st.composite
def boundary_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A spec whose path fields wander about the tree and whose strings read variables."""
    prefix = draw(st.sampled_from(["", "/", "{repo}/", "{base}/", "{repo}/specs/"]))
    changes: dict[str, Any] = {}
    for field in PATH_FIELDS:
        changes[field] = draw(REFERENCE) + prefix + draw(RELATIVE)
    for field in ["image.tag", "image.source", "gates.model_id"]:
        changes[field] = draw(REFERENCE) + draw(st.sampled_from(["", "x"]))
    declared = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=4))
    return _spec(environment=declared, **changes)


@contextmanager
def _environment(names: list[str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({name: _marker(name) for name in names})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """base/repo (a git work tree: specs/, files/, link-in → files, link-out → ../outside)
    and base/outside beside it."""
    base = tmp_path_factory.mktemp("boundary")
    repo = base / "repo"
    for folder in (repo / ".git", repo / "specs", repo / "files", base / "outside"):
        folder.mkdir(parents=True)
    (repo / "link-in").symlink_to("files")
    (repo / "link-out").symlink_to("../outside")
    (repo / "specs" / "link-out").symlink_to("/etc")
    return base


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=boundary_specs())
def test_no_generated_spec_names_a_file_or_variable_outside(
    tree: Path, spec: dict[str, Any]
) -> None:
    repo = tree / "repo"
    text = yaml.safe_dump(spec).replace("{repo}", str(repo)).replace("{base}", str(tree))
    path = repo / "specs" / "spec.yaml"
    path.write_text(text)
    allowed = {
        name
        for name in NAMES
        if (name.startswith("HANDOFF_SPEC_") or name in spec["environment"])
        and not CREDENTIAL.search(name)
    }
    with _environment(NAMES):
        try:
            loaded = load_spec(path)
        except SpecError:
            loaded = None
    # What a spec may do, decided here independently: it is refused exactly when it reads
    # a variable outside the allow-list, declares a credential, or names a file outside
    # its repository.
    written = yaml.safe_load(text)
    read = set(re.findall(r"\$\{(\w+)\}", text))
    paths = [_at(written, field) for field in PATH_FIELDS]
    for name in read & allowed:
        paths = [p.replace(f"${{{name}}}", _marker(name)) for p in paths]
    inside = all((path.parent / p).resolve().is_relative_to(repo.resolve()) for p in paths)
    clean = not any(CREDENTIAL.search(name) for name in spec["environment"])
    assert (loaded is not None) == (clean and read <= allowed and inside), (text, loaded)
    if loaded is None:
        return
    dumped = yaml.safe_dump(loaded.model_dump(mode="json"))
    for name in NAMES:
        if name not in allowed:
            assert _marker(name) not in dumped, (name, dumped)
    assert loaded.gates.parity is not None and loaded.gates.task is not None
    named = [loaded.candidate.manifest, loaded.gates.parity.golden, loaded.gates.task.suite]
    named += [loaded.gates.task.golden] if loaded.gates.task.golden else []
    for file in named:
        assert file.resolve().is_relative_to(repo.resolve()), (file, text)


def _at(spec: dict[str, Any], dotted: str) -> str:
    node: Any = spec
    for key in dotted.split("."):
        node = node[key]
    return str(node)
