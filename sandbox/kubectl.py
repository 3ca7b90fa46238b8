"""Run the kubectl built beside the control plane, as a person at the cluster would.

The seeds' objects are made with it, not with the handoff's own client, so they
belong to kubectl's field managers (`kubectl-client-side-apply`, with a
`last-applied-configuration` annotation) as they do on a real cluster.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from sandbox.paths import k8s_binary

TIMEOUT_S = 120


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    """kubectl ARGS against the kubeconfig's cluster; its stdout, or an error naming why."""
    argv = [str(k8s_binary("kubectl")), "--kubeconfig", str(kubeconfig), *args]
    result = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
        )
    return result.stdout


def kubectl_apply(kubeconfig: Path, documents: list[dict[str, Any]]) -> str:
    """`kubectl apply -f -` (client-side apply) of the documents, in order."""
    return kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(documents))
