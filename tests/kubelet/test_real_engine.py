"""An image that declares a real engine runs it: the kubelet starts llama.cpp's server on
the image's model with the pod's args, behind the pod's port and probes; the image's
``zero_key_band`` fault serves the variant with the zeroed key band."""

from __future__ import annotations

import json

import httpx
from kubernetes import client

from sandbox.simbuild import SimBuild
from tests.kubelet import objects
from tests.kubelet.conftest import SandboxKubelet
from tests.kubelet.images import push_labelled_image
from tests.kubelet.waits import is_ready, wait_for, wait_pod

ARGS = ["--host", "0.0.0.0", "--port", str(objects.PORT), "--model_alias", "smol",
        "--n_threads", "1", "--interrupt_requests", "false"]  # fmt: skip


def _engine_image(kubelet: SandboxKubelet, model: str, faults: tuple[str, ...] = ()) -> str:
    build = SimBuild(server="llama.cpp", engine="llamacpp", model=model, faults=faults)
    tag = "-".join((model, *faults)).replace("_", "-")
    push_labelled_image(kubelet.registry_url, "kubelet-tests/llamacpp", tag, build)
    return f"{kubelet.registry_host}/kubelet-tests/llamacpp:{tag}"


def _answer(local_port: int) -> str:
    body = {
        "messages": [{"role": "user", "content": "How many days are in a week?"}],
        "temperature": 0.0, "top_k": 0, "top_p": 1.0, "repeat_penalty": 1.0, "max_tokens": 16,
    }  # fmt: skip
    reply = httpx.post(f"http://127.0.0.1:{local_port}/v1/chat/completions", json=body, timeout=60)
    reply.raise_for_status()
    return str(reply.json()["choices"][0]["message"]["content"])


def _run_ready_pod(core: client.CoreV1Api, namespace: str, name: str, image: str) -> client.V1Pod:
    main = objects.container(image, args=ARGS, readiness_path="/v1/models")
    core.create_namespaced_pod(namespace, objects.pod(name, objects.pod_spec(main)))
    return wait_for(
        core.list_namespaced_pod,
        lambda pods: next((p for p in pods if p.metadata.name == name and is_ready(p)), None),
        namespace=namespace,
        timeout_s=120,
        what=f"pod {name} Ready (llama.cpp answering /v1/models)",
    )


def _local_port(kubelet: SandboxKubelet, pod: client.V1Pod) -> int:
    ports = json.loads((kubelet.run_dir / "pod-ports.json").read_text())
    return int(ports[pod.status.pod_ip][str(objects.PORT)])


def test_pod_runs_the_real_engine_with_its_args(
    core: client.CoreV1Api, namespace: str, kubelet: SandboxKubelet
) -> None:
    good = _run_ready_pod(core, namespace, "llama", _engine_image(kubelet, "q4_1"))
    bad = _run_ready_pod(
        core, namespace, "llama-zkb", _engine_image(kubelet, "q4_1", ("zero_key_band",))
    )
    port = _local_port(kubelet, good)
    models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["smol"]  # the pod's --model_alias
    assert "7 days" in _answer(port)
    assert _answer(_local_port(kubelet, bad)) != _answer(port)


def test_unknown_model_is_a_container_config_error(
    core: client.CoreV1Api, namespace: str, kubelet: SandboxKubelet
) -> None:
    main = objects.container(_engine_image(kubelet, "q2_k"), args=ARGS)
    core.create_namespaced_pod(namespace, objects.pod("nomodel", objects.pod_spec(main)))

    def waiting(pod: client.V1Pod) -> bool:
        statuses = pod.status.container_statuses or []
        return any(
            s.state.waiting and s.state.waiting.reason == "CreateContainerConfigError"
            for s in statuses
        )

    pod = wait_pod(
        core, namespace, "nomodel", waiting, timeout_s=60, what="CreateContainerConfigError"
    )
    message = pod.status.container_statuses[0].state.waiting.message
    assert "q2_k" in message and "q4_1" in message
