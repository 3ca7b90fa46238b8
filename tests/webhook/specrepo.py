"""A git repository laid out like this one (specs, manifests, golden files) for the
relay tests, a bare remote with the post-receive hook installed, and merges into it."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import yaml
from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "manifests" / "hooks" / "post-receive"


class SpecRepo(BaseModel):
    work: Path  # a clone with main checked out
    bare: Path | None = None  # its remote, when made with a hook
    namespace: str
    services: dict[str, str]  # spec name → Service name

    @property
    def specs_dir(self) -> Path:
        return self.work / "manifests" / "handoffs"


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    return result.stdout + result.stderr


def _spec(name: str, namespace: str, service: str) -> dict[str, object]:
    return {
        "name": name,
        "namespace": namespace,
        "service": service,
        "current": [f"{name}-old"],
        "candidate": {
            "manifest": f"../llm-serving/{name}.yaml",
            "deployment": name,
            "container": "server",
        },
        "image": {"repository": "registry.invalid/server", "tag": "v1", "source": "/nonexistent"},
        "gates": {"model_id": name, "parity": {"golden": f"../golden/{name}.json"}},
    }


def spec_files(name: str, namespace: str, service: str) -> dict[str, str]:
    """A spec with its candidate manifest and golden file, at their repository paths."""
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}}
    return {
        f"manifests/handoffs/{name}.yaml": yaml.safe_dump(_spec(name, namespace, service)),
        f"manifests/llm-serving/{name}.yaml": yaml.safe_dump(deployment),
        f"manifests/golden/{name}.json": "{}\n",
    }


def make_spec_repo(root: Path, specs: list[str], *, shared_service: bool = False) -> SpecRepo:
    """A committed work tree with one spec per name (each its own Service unless shared)."""
    tag = uuid.uuid4().hex[:6]
    namespace = f"ns-{tag}"
    services = {n: f"svc-{tag}" if shared_service else f"{n}-{tag}" for n in specs}
    work = root / "work"
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    git(work, "config", "user.email", "dev@example.invalid")
    git(work, "config", "user.name", "dev")
    files = {"README.md": "# models\n"}
    for name in specs:
        files.update(spec_files(name, namespace, services[name]))
    commit_files(work, files, "initial layout")
    return SpecRepo(work=work, namespace=namespace, services=services)


def commit_files(work: Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        target = work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(work, "add", *files)
    git(work, "commit", "-q", "-m", message)
    return git(work, "rev-parse", "HEAD").strip()


def bare_remote(repo: SpecRepo) -> Path:
    """A bare `origin` holding main, for the spec repository (made once; no hook:
    deliveries are posted by hand)."""
    bare = repo.work.parent / "models.git"
    if not bare.exists():
        git(repo.work.parent, "init", "-q", "--bare", "-b", "main", str(bare))
        git(repo.work, "remote", "add", "origin", str(bare))
        git(repo.work, "push", "-q", "origin", "main")
    return bare


def install_hook(bare: Path, *, relay_url: str, secret: str) -> None:
    """The post-receive hook, configured as its docstring says, posting to relay_url."""
    shutil.copy(HOOK, bare / "hooks" / "post-receive")
    secret_file = bare.parent / "webhook-secret"
    secret_file.write_text(secret + "\n")
    git(bare, "config", "handoff.relayUrl", relay_url)
    git(bare, "config", "handoff.secretFile", str(secret_file))
    git(bare, "config", "handoff.repository", "riotpiao-poimen/models")


def with_hooked_remote(repo: SpecRepo, *, relay_url: str, secret: str) -> SpecRepo:
    """A bare remote holding main, with the post-receive hook posting to relay_url."""
    bare = repo.work.parent / "models.git"
    git(repo.work.parent, "init", "-q", "--bare", "-b", "main", str(bare))
    git(repo.work, "remote", "add", "origin", str(bare))
    git(repo.work, "push", "-q", "origin", "main")  # before the hook: no delivery
    install_hook(bare, relay_url=relay_url, secret=secret)
    return repo.model_copy(update={"bare": bare})


def merge_and_push(repo: SpecRepo, files: dict[str, str], message: str) -> tuple[str, str]:
    """Commit files on a branch, merge it into main (--no-ff) and push; (merge sha, push output)."""
    branch = f"change-{uuid.uuid4().hex[:6]}"
    git(repo.work, "checkout", "-q", "-b", branch)
    commit_files(repo.work, files, message)
    git(repo.work, "checkout", "-q", "main")
    git(repo.work, "merge", "-q", "--no-ff", branch, "-m", f"Merge {branch}: {message}")
    merge = git(repo.work, "rev-parse", "HEAD").strip()
    return merge, git(repo.work, "push", "origin", "main")
