"""A llama.cpp server's source repository and its CI images in the sandbox registry.

The repository's build file declares the real engine and the model each build serves
(``sandbox.simbuild``). Its history tells the seeds' story on a real engine: the F16
reference, then a Q4_1 build whose key weights lose a channel band (a broken
conversion: fluent, wrong answers), then the fix. CI publishes one tag per stage.
"""

from __future__ import annotations

from pathlib import Path

import git

from sandbox.publisher import publish
from sandbox.simbuild import BUILD_FILE, ZERO_KEY_BAND, SimBuild, build_file_text
from sandbox.srcrepo import SourceRepo, commit_files

REPOSITORY = "handoff/llama-server"
NAME_IN_MANIFESTS = "registry.sandbox.invalid/handoff/llama-server"


def _build(model: str, *faults: str) -> dict[str, str]:
    build = SimBuild(server="llama.cpp", engine="llamacpp", model=model, faults=faults)
    return {BUILD_FILE: build_file_text(build)}


# (commit name, tag CI publishes, files, message)
_HISTORY = (
    ("f16", "f16", _build("f16"), "serve SmolLM2-135M-Instruct F16 on llama.cpp"),
    (
        "q4_1-broken",
        "q4_1-zkb",
        _build("q4_1", ZERO_KEY_BAND),
        "serve the Q4_1 release (conversion drops a key channel band)",
    ),
    ("q4_1", "q4_1", _build("q4_1"), "fix(convert): keep every key channel of attn_k"),
)


def create_llama_server_repo(path: Path) -> SourceRepo:
    repo = git.Repo.init(path, initial_branch="main")
    with repo.config_writer() as config:
        config.set_value("user", "name", "llama-server CI")
        config.set_value("user", "email", "ci@llama-server.invalid")
    commit_files(repo, {"README.md": "# llama-server\n"}, "import llama-server")
    commits = {name: commit_files(repo, files, msg) for name, _, files, msg in _HISTORY}
    return SourceRepo(path=path.resolve(), commits=commits)


def publish_llama_server(registry_url: str, source: SourceRepo) -> dict[str, str]:
    """CI: push every stage's tag; returns tag -> digest."""
    return {
        tag: publish(
            registry_url, REPOSITORY, tag, git_repo=source.path, commit=source.commits[name]
        )
        for name, tag, _, _ in _HISTORY
    }


def image_override(registry_url: str) -> str:
    """The HANDOFF_IMAGES entry pointing the manifests' name at the sandbox registry."""
    host = registry_url.removeprefix("http://").removeprefix("https://")
    return f"{NAME_IN_MANIFESTS}={host}/{REPOSITORY}"
