"""What process a container runs: the simulated model server, its profile and faults.

The profile comes from the cluster description's ``models`` rules (image server label +
weights named in the container), and with it the HTTP surface (candle-vllm's routes only)
and the cold start. Faults come from the image (``dev.handoff.sim.faults``)
and from the node: a container that requests ``nvidia.com/gpu`` in a pod without
``runtimeClassName: nvidia`` runs under runc, never gets libcuda injected, and crashes at
start-up (``crash_on_start``) — the seed's incident.

An image that declares a real engine (``dev.handoff.engine``) runs that engine's server
instead: the image's model variant (its ``zero_key_band`` fault picks the variant with the
zeroed key band), the container's args as server flags, and the run's port on 127.0.0.1.
"""

from __future__ import annotations

import sys

from kubernetes.client import V1Container, V1PodSpec

from sandbox.cluster import ClusterConfig
from sandbox.engines import llamacpp
from sandbox.kubelet.images import PulledImage
from sandbox.kubelet.nodes import GPU_RESOURCE, GPU_RUNTIME_CLASS

SERVER_MODULE = "sandbox.modelserver"


class ContainerConfigError(Exception):
    """No model-server profile fits the container; shown as CreateContainerConfigError."""


def requests_gpu(container: V1Container) -> bool:
    resources = container.resources
    if resources is None:
        return False
    amounts = {**(resources.requests or {}), **(resources.limits or {})}
    return str(amounts.get(GPU_RESOURCE, "0")) not in ("0", "")


def container_words(container: V1Container) -> list[str]:
    """Command, args and literal env values: where a container names its weights."""
    env = [e.value for e in container.env or [] if e.value]
    return [*(container.command or []), *(container.args or []), *env]


def flag_value(words: list[str], flag: str) -> str | None:
    """The value of ``flag`` (``--flag=v`` or ``--flag v``), if the container sets it."""
    for i, word in enumerate(words):
        if word.startswith(f"{flag}="):
            return word.split("=", 1)[1]
        if word == flag and i + 1 < len(words):
            return words[i + 1]
    return None


def served_model_name(words: list[str]) -> str | None:
    """The value of ``--served-model-name`` (vLLM's flag), if the container sets one."""
    return flag_value(words, "--served-model-name")


def server_argv(
    *,
    cluster: ClusterConfig,
    spec: V1PodSpec,
    container: V1Container,
    image: PulledImage,
    port: int,
) -> list[str]:
    """The model-server command line for one container run on 127.0.0.1:``port``."""
    if image.build is not None and image.build.engine:
        return engine_argv(container=container, image=image, port=port)
    server = image.build.server if image.build else None
    words = container_words(container)
    rule = cluster.model_for(server, " ".join(words))
    if rule is None:
        raise ContainerConfigError(
            f'no model-server profile for image "{image.image}" (server label '
            f"{server or 'absent'}) with command {words}: add a rule to the cluster "
            "description's models table"
        )
    # No --time-scale: it would scale step times too, which stay as the seeds measured them.
    argv = [sys.executable, "-m", SERVER_MODULE, "--profile", rule.profile, "--port", str(port)]
    model_id = served_model_name(words) or rule.model_id
    if model_id:
        argv += ["--model-id", model_id]
    faults = list(image.build.faults) if image.build else []
    if requests_gpu(container) and spec.runtime_class_name != GPU_RUNTIME_CLASS:
        faults.append("crash_on_start")
    if rule.surface != "openai":
        argv += ["--surface", rule.surface]
    # vLLM's own flag: how long SIGTERM lets running requests go on (0, its default: none),
    # in real seconds like the grace period. Left out, the simulated server drains until
    # none runs, as a long timeout would.
    if (shutdown_timeout := flag_value(words, "--shutdown-timeout")) is not None:
        argv += ["--shutdown-timeout-s", _seconds(shutdown_timeout, "--shutdown-timeout")]
    # A request's simulated duration (sandbox_duration_s) runs on the cluster's clock.
    argv += ["--delay-scale", str(cluster.time_scale)]
    cold_start_s = str(rule.cold_start_s * cluster.time_scale)
    if rule.cold_start_s and rule.surface == "candle-vllm":  # loads before it listens
        argv += ["--load-s", cold_start_s]
    elif rule.cold_start_s:
        faults.append("slow_start")
        argv += ["--slow-start-s", cold_start_s]
    for fault in dict.fromkeys(faults):
        argv += ["--fault", fault]
    return argv


def _seconds(value: str, flag: str) -> str:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise ContainerConfigError(f"{flag} {value!r}: expected seconds, a number >= 0")
    return str(seconds)


# Flags the node decides, not the pod: the image holds the model, the kubelet the address.
_NODE_FLAGS = ("--model", "--host", "--port")


def engine_argv(*, container: V1Container, image: PulledImage, port: int) -> list[str]:
    """The real engine's server for an image that declares one, with the container's args."""
    assert image.build is not None
    engine, model = image.build.engine, image.build.model or ""
    if engine != "llamacpp":
        raise ContainerConfigError(
            f'image "{image.image}" declares engine {engine!r}; the sandbox runs only llamacpp'
        )
    variant = f"{model}-zkb" if "zero_key_band" in image.build.faults else model
    if variant not in llamacpp.VARIANTS:
        raise ContainerConfigError(
            f'image "{image.image}" declares model {model!r} for llamacpp; expected one of '
            f"{[v for v in llamacpp.VARIANTS if not v.endswith('-zkb')]}"
        )
    try:
        path = llamacpp.model_path(variant)
    except (llamacpp.EngineMissing, RuntimeError) as exc:
        raise ContainerConfigError(str(exc)) from exc
    return llamacpp.server_argv(path, port, _without_node_flags(container.args or []))


def _without_node_flags(args: list[str]) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in _NODE_FLAGS:
            skip = True
        elif not arg.startswith(tuple(f"{flag}=" for flag in _NODE_FLAGS)):
            out.append(arg)
    return out
