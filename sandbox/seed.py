"""The seeds' world in the sandbox: source repositories, CI-built images and the
*before* state of the llm-serving namespace (coder on GPTQ 30B-A3B, clef-serve on
PyTorch, the reasoning model holding a third card).

Images keep their real names in the manifests; `image_overrides()` gives the
`HANDOFF_IMAGES` value that points them at the sandbox registry.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import git
import yaml
from pydantic import BaseModel

from sandbox.kubectl import kubectl, kubectl_apply
from sandbox.publisher import publish
from sandbox.simbuild import BUILD_FILE, SimBuild, build_file_text
from sandbox.srcrepo import SourceRepo, commit_files, commit_gdn_fix, create_candle_vllm_repo

ROOT = Path(__file__).resolve().parent.parent
LLM_SERVING = ROOT / "manifests" / "llm-serving"
REAL_REGISTRY = "forgejo.riotpiao.com"
ORG = "riotpiao-poimen"
NAMESPACE = "llm-serving"
# What the seeds' clients send through each Service: both Services end on candle-vllm,
# which serves chat only, so their clients speak chat to both servers.
CLIENT_API: dict[str, Literal["completions", "chat"]] = {
    "clef-serve": "chat",
    "coder-predictor": "chat",
}
BEFORE_FILES = (
    "namespace.yaml",
    "coder-service.yaml",
    "clef-serve-service.yaml",
    "before/coder-gptq-30b-a3b.yaml",
    "before/clef-serve.yaml",
    "before/reasoning-long.yaml",
)


class World(BaseModel):
    """Where the seeds' repositories are and which registry the images go to."""

    registry_url: str
    candle_vllm: SourceRepo
    clef_serve: Path
    vllm: Path

    @property
    def registry_host(self) -> str:
        return self.registry_url.removeprefix("http://").removeprefix("https://")

    def image_overrides(self) -> str:
        names = ("candle-vllm", "clef-serve", "vllm")
        return ",".join(f"{REAL_REGISTRY}/{ORG}/{n}={self.registry_host}/{ORG}/{n}" for n in names)

    def environment(self) -> dict[str, str]:
        """What the handoff specs need from the environment in the sandbox."""
        return {
            "HANDOFF_IMAGES": self.image_overrides(),
            "CANDLE_VLLM_SOURCE": str(self.candle_vllm.path),
        }


def _server_repo(path: Path, server: str) -> Path:
    if not path.exists():
        repo = git.Repo.init(path, initial_branch="main")
        with repo.config_writer() as config:
            config.set_value("user", "name", f"{server} CI")
            config.set_value("user", "email", "ci@example.invalid")
        commit_files(
            repo,
            {BUILD_FILE: build_file_text(SimBuild(server=server)), "README.md": f"# {server}\n"},
            f"import {server}",
        )
    return path


def create_world(src_dir: Path, registry_url: str) -> World:
    """Make the repositories (once) and publish the images the before state runs."""
    candle = src_dir / "candle-vllm"
    repo = (
        SourceRepo(path=candle, commits={})
        if candle.exists()
        else create_candle_vllm_repo(candle, with_fix=False)
    )
    world = World(
        registry_url=registry_url,
        candle_vllm=repo,
        clef_serve=_server_repo(src_dir / "clef-serve", "clef-serve"),
        vllm=_server_repo(src_dir / "vllm", "vllm"),
    )
    head = "HEAD"
    for name, tag, path in (
        ("clef-serve", "pytorch", world.clef_serve),
        ("vllm", "v0.11-sm70", world.vllm),
        ("candle-vllm", "sm70-gptq-slim", candle),
        ("candle-vllm", "sm70", candle),
    ):
        publish(registry_url, f"{ORG}/{name}", tag, git_repo=path, commit=head)
    return world


def merge_gdn_fix(world: World) -> str:
    """Merge candle-vllm PR #5 (the GDN conv fix) on main; CI has not built it yet."""
    return commit_gdn_fix(git.Repo(world.candle_vllm.path))


def publish_candle(world: World, *, delay_s: float = 0.0) -> str:
    """CI after a merge: build main's head of candle-vllm and push :sm70."""
    return publish(
        world.registry_url,
        f"{ORG}/candle-vllm",
        "sm70",
        git_repo=world.candle_vllm.path,
        commit="HEAD",
        delay_s=delay_s,
    )


def before_state_documents(world: World, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The before-state manifests with their images pointed at the sandbox registry,
    optionally moved to another namespace (its own PersistentVolume included)."""
    docs = []
    for name in BEFORE_FILES:
        for doc in yaml.safe_load_all((LLM_SERVING / name).read_text()):
            if doc:
                docs.append(_in_namespace(_override_images(doc, world), namespace))
    return docs


def apply_before_state(kubeconfig: Path, world: World, namespace: str = NAMESPACE) -> None:
    """Apply the before state as its users did: `kubectl apply` (client-side), so the
    objects belong to kubectl, not to the handoff's field manager."""
    kubectl_apply(kubeconfig, before_state_documents(world, namespace))


def remove_world(
    src_dir: Path,
    kubeconfig: Path,
    say: Callable[[str], None],
    namespace: str = NAMESPACE,
    timeout_s: float = 180.0,
) -> None:
    """Remove what an earlier world left: its repositories, its namespace (waiting until
    it is gone, so the next before state starts afresh) and its PersistentVolume."""
    shutil.rmtree(src_dir, ignore_errors=True)
    if _namespace(kubeconfig, namespace) is None:
        return
    say(f"removing the {namespace} namespace an earlier run left")
    kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false")
    deadline = time.monotonic() + timeout_s
    while (left := _namespace(kubeconfig, namespace)) is not None:
        if time.monotonic() > deadline:
            status = left.get("status") or {}
            held = "; ".join(str(c.get("message")) for c in status.get("conditions") or [])
            raise TimeoutError(
                f"namespace {namespace}: expected it gone within {timeout_s:.0f} s of its "
                f"deletion, but it is still {status.get('phase', 'there')}"
                + (f" ({held})" if held else "")
                + f"; see what holds it with `kubectl get all,pvc -n {namespace}` and its "
                "finalizers, remove them, then run again"
            )
        time.sleep(0.5)
    for volume in _volumes(namespace):
        kubectl(kubeconfig, "delete", "persistentvolume", volume, "--ignore-not-found")


def _namespace(kubeconfig: Path, namespace: str) -> dict[str, Any] | None:
    """The namespace as the API has it, None when there is none."""
    found = kubectl(kubeconfig, "get", "namespace", namespace, "--ignore-not-found", "-o", "json")
    return json.loads(found) if found.strip() else None


def _volumes(namespace: str) -> list[str]:
    """The PersistentVolumes the before state makes for the namespace."""
    docs = yaml.safe_load_all((LLM_SERVING / "namespace.yaml").read_text())
    return [
        _in_namespace(d, namespace)["metadata"]["name"]
        for d in docs
        if d and d["kind"] == "PersistentVolume"
    ]


def _override_images(doc: dict[str, Any], world: World) -> dict[str, Any]:
    if doc.get("kind") == "Deployment":
        for container in doc["spec"]["template"]["spec"]["containers"]:
            container["image"] = container["image"].replace(REAL_REGISTRY, world.registry_host, 1)
    return doc


def _in_namespace(doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    if namespace == NAMESPACE:
        return doc
    kind, meta = doc["kind"], doc["metadata"]
    if kind == "Namespace":
        meta["name"] = namespace
    elif kind == "PersistentVolume":
        meta["name"] = f"{meta['name']}-{namespace}"
        doc["spec"]["claimRef"]["namespace"] = namespace
    elif kind != "RuntimeClass":
        meta["namespace"] = namespace
    if kind == "PersistentVolumeClaim":
        doc["spec"]["volumeName"] = f"{doc['spec']['volumeName']}-{namespace}"
    return doc
