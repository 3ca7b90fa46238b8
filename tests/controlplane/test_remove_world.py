"""The seeds' world removed on a real control plane: a namespace still terminating past
the timeout is an error that names it and what holds it; once free, the namespace, its
PersistentVolume and the repositories are gone, and a second removal has nothing to do."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sandbox import controlplane
from sandbox.kubectl import kubectl, kubectl_apply
from sandbox.seed import LLM_SERVING, NAMESPACE, remove_world

pytestmark = pytest.mark.timeout(240)
HOLD = "example.org/hold"  # a finalizer no controller removes


def test_remove_world_waits_for_the_namespace_and_names_what_holds_it(tmp_path: Path) -> None:
    plane = controlplane.start(tmp_path / "plane")
    try:
        config = plane.kubeconfig
        kubectl_apply(
            config,
            [d for d in yaml.safe_load_all((LLM_SERVING / "namespace.yaml").read_text()) if d],
        )
        held = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "held", "namespace": NAMESPACE, "finalizers": [HOLD]},
        }
        kubectl_apply(config, [held])
        src = tmp_path / "src"
        (src / "candle-vllm").mkdir(parents=True)
        said: list[str] = []

        with pytest.raises(TimeoutError) as stuck:
            remove_world(src, config, said.append, timeout_s=3)
        message = str(stuck.value)
        assert message.startswith(f"namespace {NAMESPACE}: expected it gone within 3 s"), message
        assert "still Terminating" in message and "kubectl get all,pvc" in message, message
        assert said == [f"removing the {NAMESPACE} namespace an earlier run left"]
        assert not src.exists()

        kubectl(
            config,
            "patch",
            "configmap",
            "held",
            "-n",
            NAMESPACE,
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
        )
        remove_world(src, config, said.append, timeout_s=60)
        assert not kubectl(
            config, "get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name"
        )
        assert not kubectl(config, "get", "pv", "llm-models", "--ignore-not-found", "-o", "name")

        said.clear()
        remove_world(src, config, said.append)
        assert said == [], "nothing left to remove, nothing said"
    finally:
        controlplane.stop(plane)
