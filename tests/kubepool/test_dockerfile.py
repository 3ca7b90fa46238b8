"""The flow's Dockerfile, checked without building it (no container daemon or base image
here): what it copies exists and is not ignored, it installs as docs/operating.md says, on the
project's Python, into the directory prefect.yaml's Kubernetes deployment runs in, and
carries the label that the sandbox kubelet maps to this checkout."""

from __future__ import annotations

import fnmatch
import re
import shlex
import tomllib
from pathlib import Path

import yaml

from flows.workpool import render_pool_template
from sandbox import flowimage

ROOT = flowimage.ROOT
INSTALL = "uv sync --frozen --no-dev"


def _all(keyword: str) -> list[str]:
    return [rest for k, rest in flowimage.instructions() if k == keyword]


def _kubernetes_deployment() -> dict:  # type: ignore[type-arg]
    config = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    return next(d for d in config["deployments"] if d["name"] == "handoff-on-merge-kubernetes")


def test_what_it_copies_exists_and_is_not_ignored() -> None:
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources = [src for rest in _all("COPY") for src in shlex.split(rest)[:-1]]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), f"Dockerfile copies {source}, not in the repository"
        assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), source


def test_it_installs_from_the_lock_as_the_docs_say() -> None:
    runs = _all("RUN")
    assert INSTALL in runs, runs
    assert f"{INSTALL} --no-install-project" in runs, "the locked dependencies as a layer"
    assert INSTALL in (ROOT / "docs" / "operating.md").read_text()
    # `uv` itself: the version this checkout was locked and tested with, from PyPI.
    assert any(re.fullmatch(r"pip install --no-cache-dir uv==[\d.]+", r) for r in runs), runs


def test_its_python_is_the_projects() -> None:
    (base,) = _all("FROM")
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert base.startswith("python:3.11-") and requires == ">=3.11,<3.12", (base, requires)


def test_it_runs_where_the_kubernetes_deployment_expects() -> None:
    deployment = _kubernetes_deployment()
    (step,) = deployment["pull"]
    # Each run clones its merge commit outside the image's own (read-only) project.
    clone = step["flows.checkout.clone_run_commit"]
    root = _all("WORKDIR")[-1]
    assert flowimage.labels()[flowimage.ROOT_LABEL] == root
    assert not Path(clone["parent"]).is_relative_to(root), clone
    assert "/opt/handoff/.venv/bin" in _all("ENV")[-1]
    # The worker gives the container args and no command: no ENTRYPOINT may eat them.
    assert not _all("ENTRYPOINT")
    assert _all("CMD") == ['["prefect", "flow-run", "execute"]']
    variables = deployment["work_pool"]["job_variables"]
    # The image, command and account are the pool's, fixed (flows/workpool.py).
    assert not {"image", "command", "service_account_name"} & set(variables)
    pod = render_pool_template("r.example/handoff@sha256:" + "0" * 64)["job_configuration"]
    account = pod["job_manifest"]["spec"]["template"]["spec"]["serviceAccountName"]
    rbac = yaml.safe_load_all((ROOT / "manifests" / "rbac" / "handoff.yaml").read_text())
    shipped = next(d for d in rbac if d and d["kind"] == "ServiceAccount")["metadata"]
    assert (account, variables["namespace"]) == (shipped["name"], shipped["namespace"])
