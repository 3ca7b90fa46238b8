"""A container of the flow's image (labelled ``dev.handoff.flow.root``) as a local process.

The image maps to this checkout and its virtual environment: the checkout is mounted
read-only at the label's directory (``/opt/handoff``, where the Dockerfile installs the
project) and the environment's ``bin`` leads PATH, so ``prefect flow-run execute`` runs
the flow as the image would. The pod's volumes are projected as a kubelet does: each
Secret, ConfigMap or emptyDir volume is written under the pod's directory and bind-mounted
at its mountPath, among them the ServiceAccount token Secret that the 1.20 admission
plugin mounts at /var/run/secrets/kubernetes.io/serviceaccount (token, ca.crt,
namespace). The mounts live in a private mount namespace of the container's process
(``mountns.py``). The environment is the container's (literal values, and the keys of
Secrets and ConfigMaps its valueFrom names, read when the container starts), plus
KUBERNETES_SERVICE_HOST/PORT naming the apiserver on loopback, so the flow's client
loads in-cluster config and acts as the pod's ServiceAccount.
"""

from __future__ import annotations

import base64
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from kubernetes import client
from kubernetes.client import (
    V1ConfigMapKeySelector,
    V1Container,
    V1EnvVar,
    V1PodSpec,
    V1SecretKeySelector,
    V1Volume,
)
from kubernetes.client.exceptions import ApiException

from sandbox.kubelet.command import ContainerConfigError
from sandbox.kubelet.context import NodeContext
from sandbox.kubelet.events import PodRef
from sandbox.kubelet.images import PulledImage

CHECKOUT = Path(__file__).resolve().parents[2]
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Launch:
    """A container process: its command line and environment (None: the kubelet's)."""

    argv: list[str]
    env: dict[str, str] | None = None


def flow_launch(
    ctx: NodeContext,
    pod: PodRef,
    spec: V1PodSpec,
    container: V1Container,
    image: PulledImage,
    pod_dir: Path,
) -> Launch:
    assert image.flow_root is not None
    command = [*(container.command or []), *(container.args or [])]
    if not command:
        raise ContainerConfigError(
            f'container {container.name} of image "{image.image}" has no command or args: '
            "the flow's image has no entrypoint; give the container `prefect flow-run execute`"
        )
    binds = [f"{CHECKOUT}:{image.flow_root}:ro"]
    for mount in container.volume_mounts or []:
        source = _project(ctx, pod, _volume(spec, mount.name, container), pod_dir)
        binds.append(f"{source}:{mount.mount_path}" + (":ro" if mount.read_only else ""))
    argv = ["unshare", "--mount", "--propagation", "private", "--"]
    argv += [sys.executable, "-m", "sandbox.kubelet.mountns"]
    for bind in binds:
        argv += ["--bind", bind]
    argv += ["--workdir", container.working_dir or image.flow_root, "--", *command]
    return Launch(argv, _environment(ctx, pod, container, pod_dir))


def _volume(spec: V1PodSpec, name: str, container: V1Container) -> V1Volume:
    for volume in spec.volumes or []:
        if volume.name == name:
            return volume
    raise ContainerConfigError(f"container {container.name} mounts volume {name!r}, not in the pod")


def _keys(
    core: client.CoreV1Api, kind: str, name: str | None, namespace: str, where: str
) -> dict[str, bytes]:
    """A Secret's (kind "secret") or a ConfigMap's keys and their bytes."""
    if name is None:
        raise ContainerConfigError(f"{where} names no {kind}; give it the {kind}'s name")
    if kind == "secret":
        secret = core.read_namespaced_secret(name, namespace).data or {}
        return {k: base64.b64decode(v) for k, v in secret.items()}
    config = core.read_namespaced_config_map(name, namespace).data or {}
    return {k: v.encode() for k, v in config.items()}


def _project(ctx: NodeContext, pod: PodRef, volume: V1Volume, pod_dir: Path) -> Path:
    """Write the volume's files under the pod's directory; the directory to bind-mount."""
    target = pod_dir / "volumes" / volume.name
    target.mkdir(parents=True, exist_ok=True)
    core = client.CoreV1Api(ctx.api)
    where = f"pod {pod.namespace}/{pod.name}: volume {volume.name!r}"
    try:
        if volume.secret is not None:
            files = _keys(core, "secret", volume.secret.secret_name, pod.namespace, where)
        elif volume.config_map is not None:
            files = _keys(core, "configmap", volume.config_map.name, pod.namespace, where)
        elif volume.empty_dir is not None:
            files = {}
        else:
            raise ContainerConfigError(
                f"volume {volume.name!r}: the sandbox kubelet projects only secret, "
                "configMap and emptyDir volumes"
            )
    except ApiException as exc:
        source = volume.secret or volume.config_map
        if exc.status == 404 and source is not None and source.optional:
            files = {}  # as a kubelet mounts an optional source that is missing: empty
        else:
            raise ContainerConfigError(
                f"MountVolume.SetUp failed for volume {volume.name!r}: {exc.status} {exc.reason}"
            ) from exc
    for key, data in files.items():
        path = target / key
        path.write_bytes(data)
        path.chmod(0o644)  # defaultMode 420
    return target


def _environment(
    ctx: NodeContext, pod: PodRef, container: V1Container, pod_dir: Path
) -> dict[str, str]:
    api = urlsplit(str(ctx.api.configuration.host))
    home = pod_dir / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": f"{Path(sys.prefix) / 'bin'}:{SYSTEM_PATH}",
        "HOME": str(home),
        "HOSTNAME": pod.name,
        "KUBERNETES_SERVICE_HOST": api.hostname or "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(api.port or 443),
    }
    for var in container.env or []:
        if var.value_from is None:
            env[var.name] = var.value or ""
        elif (value := _env_from_ref(ctx, pod, container, var)) is not None:
            env[var.name] = value
    return env


def _env_from_ref(
    ctx: NodeContext, pod: PodRef, container: V1Container, var: V1EnvVar
) -> str | None:
    """The value of a secretKeyRef or configMapKeyRef, read from the API as a kubelet
    reads it when it starts the container; None for an optional one that is missing."""
    source = var.value_from
    where = f"pod {pod.namespace}/{pod.name}: container {container.name}: env {var.name}"
    ref: V1SecretKeySelector | V1ConfigMapKeySelector
    if source is not None and source.secret_key_ref is not None:
        ref, kind = source.secret_key_ref, "secret"
    elif source is not None and source.config_map_key_ref is not None:
        ref, kind = source.config_map_key_ref, "configmap"
    else:
        raise ContainerConfigError(
            f"{where} uses a valueFrom the sandbox kubelet does not resolve (only "
            "secretKeyRef and configMapKeyRef); give it a value"
        )
    core = client.CoreV1Api(ctx.api)
    try:
        raw = _keys(core, kind, ref.name, pod.namespace, where).get(ref.key)
        value = raw.decode() if raw is not None else None
    except ApiException as exc:
        if exc.status != 404:
            raise ContainerConfigError(
                f'{where}: reading {kind} "{ref.name}" failed: {exc.status} {exc.reason}'
            ) from exc
        if ref.optional:
            return None
        raise ContainerConfigError(
            f'{where}: {kind} "{ref.name}" not found in namespace {pod.namespace}; '
            "create it or mark the reference optional"
        ) from exc
    if value is None and not ref.optional:
        raise ContainerConfigError(
            f'{where}: {kind} "{ref.name}" has no key "{ref.key}"; '
            "add the key or mark the reference optional"
        )
    return value
