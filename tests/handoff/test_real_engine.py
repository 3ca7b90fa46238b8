"""Handoffs with real inference on both sides: SmolLM2-135M on llama.cpp in the sandbox's
pods. The F16 reference moves to the Q4_1 build side by side without a failed client
request; the Q4_1 build that lost a key channel band is refused by parity and rolled back
while clients keep being answered by the F16 reference."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from flows.kube.client import Kube
from flows.kube.write import apply_manifest
from flows.ledger import Ledger, parse_ledger
from sandbox.engines.images import (
    NAME_IN_MANIFESTS,
    create_llama_server_repo,
    image_override,
    publish_llama_server,
)
from sandbox.engines.llamacpp import ServerOptions, ServerPool
from sandbox.proxy import address_of
from sandbox.srcrepo import SourceRepo
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.world import ROOT, handoff_cli, run_handoff, service, wait_deployments_ready

MANIFESTS = ROOT / "manifests" / "real-engine"
PROMPTS = ROOT / "manifests" / "prompts"
# The pods' own server flags (manifests/real-engine), so the golden server computes alike.
POD_OPTIONS = ServerOptions(model_alias="smollm2", n_threads=1, n_ctx=2048)
# Every test here is slow: a sandbox handoff with parity and latency gates on llama.cpp
# pods takes minutes, and the F16 golden file scores the long reference text.
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="session")
def llama_source(sandbox: SandboxState, tmp_path_factory: pytest.TempPathFactory) -> SourceRepo:
    source = create_llama_server_repo(tmp_path_factory.mktemp("src") / "llama-server")
    publish_llama_server(sandbox.registry_url or "", source)
    return source


def _record_f16_golden(pool: ServerPool, out: Path, *reference: str) -> Path:
    """Recorded from an F16 server with the pods' flags: what the live pod answers."""
    server = pool.get("f16", POD_OPTIONS)
    done = subprocess.run(
        handoff_cli("golden", "record", "--url", server.url,
                    "--prompts", str(PROMPTS / "smollm2.jsonl"), *reference, "--out", str(out)),
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="session")
def f16_golden(llamacpp: ServerPool, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Over the long reference text, which a quantization needs to be judged fairly."""
    out = tmp_path_factory.mktemp("golden") / "smollm2-f16.golden.json"
    return _record_f16_golden(llamacpp, out, "--reference", str(PROMPTS / "reference-long.txt"))


@pytest.fixture(scope="session")
def f16_golden_short(llamacpp: ServerPool, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Over the built-in reference text: enough for the key band, and half the positions."""
    out = tmp_path_factory.mktemp("golden") / "smollm2-f16-short.golden.json"
    return _record_f16_golden(llamacpp, out)


@pytest.fixture
def live_f16(kube: Kube, sandbox: SandboxState) -> Iterator[str]:
    """A namespace where the smollm2 Service selects the F16 Deployment, Ready."""
    namespace = f"smol-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace({"metadata": {"name": namespace}})
    sandbox_name = image_override(sandbox.registry_url or "").split("=", 1)[1]
    for name in ("service.yaml", "smollm2-f16.yaml"):
        doc = yaml.safe_load((MANIFESTS / name).read_text())
        doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "Deployment":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            container["image"] = container["image"].replace(NAME_IN_MANIFESTS, sandbox_name)
        apply_manifest(kube, doc)
    wait_deployments_ready(kube, namespace, ("smollm2-f16",), timeout_s=180)
    yield namespace
    kube.core.delete_namespace(namespace)
    deadline = time.monotonic() + 60
    while kube.core.list_namespaced_pod(namespace).items and time.monotonic() < deadline:
        time.sleep(0.5)


def _spec_env(
    env: dict[str, str], sandbox: SandboxState, source: SourceRepo, ns: str, tag: str
) -> dict[str, str]:
    return env | {
        "HANDOFF_IMAGES": f"{env['HANDOFF_IMAGES']},{image_override(sandbox.registry_url or '')}",
        "LLAMA_SERVER_SOURCE": str(source.path),
        "SMOLLM2_NAMESPACE": ns,
        "SMOLLM2_CANDIDATE_TAG": tag,
    }


@dataclass
class Moved:
    """A handoff run under client load, and what it left on the Service."""

    result: subprocess.CompletedProcess[str]
    load: ClientLoad
    selector: dict[str, str]
    ledger: Ledger | None


Move = Callable[[Path, str], Moved]


def _spec_beside(golden: Path, out: Path) -> Path:
    """The smollm2 spec and manifest copied into `out` with the golden recorded for this
    run beside them, under the name the spec defaults to: a spec names only files of
    its own tree, and a golden recorded in a temporary directory is in none."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("handoff-q4.yaml", "smollm2-q4.yaml"):
        shutil.copyfile(MANIFESTS / name, out / name)
    shutil.copyfile(golden, out / "smollm2-f16.golden.json")
    return out / "handoff-q4.yaml"


@pytest.fixture
def move(
    sandbox: SandboxState,
    kube: Kube,
    live_f16: str,
    llama_source: SourceRepo,
    handoff_env: dict[str, str],
    tmp_path: Path,
) -> Move:
    """``move(golden, tag)``: the smollm2 handoff to the image ``tag`` under client load."""

    def run(golden: Path, tag: str) -> Moved:
        env = _spec_env(handoff_env, sandbox, llama_source, live_f16, tag)
        spec_file = _spec_beside(golden, tmp_path / f"spec-{tag}")
        url = "http://" + address_of(sandbox.run_dir, live_f16, "smollm2", 80)
        with ClientLoad(url, streams=2, max_tokens=4) as load:
            result = run_handoff(spec_file, env, "--auto-approve", timeout_s=600)
        svc = service(kube, live_f16, "smollm2")
        return Moved(result, load, svc.spec.selector, parse_ledger(svc.metadata.annotations))

    return run


# Parity on the candidate pod scores the long reference text: minutes on a loaded machine.
@pytest.mark.slow
def test_f16_to_q4_1_side_by_side_without_a_failed_request(
    move: Move, kube: Kube, live_f16: str, f16_golden: Path
) -> None:
    moved = move(f16_golden, "q4_1")
    assert moved.result.returncode == 0, moved.result.stdout[-4000:] + moved.result.stderr[-3000:]
    assert moved.load.succeeded > 0 and moved.load.failed == [], moved.load.failed[:3]
    ledger = moved.ledger
    assert ledger is not None and ledger.phase == "done" and ledger.strategy == "side-by-side"
    assert moved.selector["app"] == "smollm2-q4"
    assert kube.apps.read_namespaced_deployment("smollm2-f16", live_f16).spec.replicas == 0


# Three minutes and more on a loaded machine; tests/gates/test_real_engine.py judges the
# same build fast, and tests/kubelet/test_real_engine.py runs the engine in pods.
@pytest.mark.slow
def test_zeroed_key_band_build_is_refused_by_parity_and_rolled_back(
    move: Move, kube: Kube, live_f16: str, f16_golden_short: Path
) -> None:
    moved = move(f16_golden_short, "q4_1-zkb")
    assert moved.result.returncode != 0
    assert moved.load.failed == [], moved.load.failed[:3]
    ledger = moved.ledger
    assert ledger is not None and ledger.phase == "rolled-back", moved.result.stdout[-3000:]
    assert "parity fail" in (ledger.cause or ""), ledger.cause
    assert moved.selector == {"app": "smollm2-f16"}
    assert kube.apps.read_namespaced_deployment("smollm2-q4", live_f16).spec.replicas == 0
