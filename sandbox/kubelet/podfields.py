"""The fields of a pod object that the API server always sets, read as their types.

The client's models declare every field optional. A pod the API server lists or watches
has metadata with a name, namespace, uid and resourceVersion, and a spec; one bound to a
node has spec.nodeName; a list has metadata.resourceVersion. An object without them did
not come from the API server, and MalformedPod names the field it lacks.
"""

from __future__ import annotations

from typing import TypeVar

from kubernetes.client import V1ObjectMeta, V1Pod, V1PodList, V1PodSpec

from sandbox.kubelet.events import PodRef

T = TypeVar("T")


class MalformedPod(ValueError):
    """A pod object without a field the API server always sets."""


def present(value: T | None, pod: V1Pod, field: str) -> T:
    """``value``, the pod's ``field``; MalformedPod when the API server left it unset."""
    if value is None:
        meta = pod.metadata
        name = f"{meta.namespace}/{meta.name}" if meta is not None else "(no metadata)"
        raise MalformedPod(
            f"pod {name} has no {field}, which the API server always sets: "
            "the object did not come from the API server; list the pods again"
        )
    return value


def metadata(pod: V1Pod) -> V1ObjectMeta:
    return present(pod.metadata, pod, "metadata")


def spec(pod: V1Pod) -> V1PodSpec:
    return present(pod.spec, pod, "spec")


def uid(pod: V1Pod) -> str:
    return present(metadata(pod).uid, pod, "metadata.uid")


def resource_version(pod: V1Pod) -> str:
    return present(metadata(pod).resource_version, pod, "metadata.resourceVersion")


def pod_ref(pod: V1Pod) -> PodRef:
    """The pod's namespace, name, uid and node."""
    meta = metadata(pod)
    return PodRef(
        present(meta.namespace, pod, "metadata.namespace"),
        present(meta.name, pod, "metadata.name"),
        uid(pod),
        present(spec(pod).node_name, pod, "spec.nodeName"),
    )


def list_version(listed: V1PodList) -> str:
    """The resourceVersion a watch of the listed pods starts from."""
    version = listed.metadata.resource_version if listed.metadata is not None else None
    if version is None:
        raise MalformedPod(
            "a pod list has no metadata.resourceVersion, which the API server always sets: "
            "a watch cannot start from it; list the pods again"
        )
    return version
