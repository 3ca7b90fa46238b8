"""Run a command in a pod's container through the apiserver, as `kubectl exec` does.

Used only where a spec opts in (retire.drain_connections): exec into a pod is a grant
that reaches whatever the pod can read, so the Role carries it only then.
"""

from __future__ import annotations

import json

from kubernetes import client
from kubernetes.stream import stream

from flows.kube.client import Kube


class ExecFailed(Exception):
    """The command could not run in the pod, or did not succeed there."""


def exec_output(
    kube: Kube, namespace: str, pod: str, container: str, command: list[str], timeout_s: float
) -> str:
    """The command's stdout; ExecFailed on a 403 (no pods/exec), a refused upgrade, a
    timeout or a non-zero exit."""
    # The client's stream() swaps its ApiClient's request method: use an ApiClient of its own.
    core = client.CoreV1Api(client.ApiClient(kube.api.configuration))
    try:
        ws = stream(
            core.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=command,
            container=container,
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
            _preload_content=False,
        )
        ws.run_forever(timeout=timeout_s)
        out, status = ws.read_stdout(), ws.read_channel(3)
        ws.close()
    except Exception as exc:
        raise ExecFailed(f"exec into pod {namespace}/{pod} failed: {exc}") from exc
    outcome = json.loads(status) if status else {}
    if outcome.get("status") != "Success":
        raise ExecFailed(
            f"`{' '.join(command)}` in pod {namespace}/{pod} (container {container}) "
            f"failed: {outcome.get('message') or status or 'no status'}"
        )
    return str(out)
