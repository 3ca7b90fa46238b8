"""Start the simulated kubelet as a background process and wait until it is ready.

The kubelet writes ``RUN_DIR/kubelet/ready.json`` (its pid, HTTPS port and nodes) once
its nodes are registered and its pod watches run; ``start`` waits for that file to name
the process it spawned, and fails with the log's tail if the process exits first.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sandbox import procs

READY_FILE = "ready.json"
READY_TIMEOUT_S = 60.0


class KubeletStartError(RuntimeError):
    """The kubelet exited or did not get ready during start-up."""


def kubelet_argv(
    *, run_dir: Path, kubeconfig: Path, cluster: Path, registry_url: str, pki: Path | None = None
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "sandbox.kubelet",
        "--run-dir",
        str(run_dir),
        "--kubeconfig",
        str(kubeconfig),
        "--cluster",
        str(cluster),
        "--registry",
        registry_url,
    ]
    return argv + (["--pki", str(pki)] if pki else [])


def ready_file(run_dir: Path) -> Path:
    return run_dir / "kubelet" / READY_FILE


def start(
    *,
    run_dir: Path,
    kubeconfig: Path,
    cluster: Path,
    registry_url: str,
    pki: Path | None = None,
    timeout_s: float = READY_TIMEOUT_S,
) -> procs.ProcessRecord:
    """Spawn the kubelet (log: RUN_DIR/logs/kubelet.log) and wait until it is ready."""
    argv = kubelet_argv(
        run_dir=run_dir, kubeconfig=kubeconfig, cluster=cluster, registry_url=registry_url, pki=pki
    )
    record = procs.spawn("kubelet", argv, run_dir / "logs" / "kubelet.log")
    try:
        wait_ready(run_dir, record, timeout_s=timeout_s)
    except BaseException:
        procs.stop(record)
        raise
    return record


def wait_ready(run_dir: Path, record: procs.ProcessRecord, *, timeout_s: float) -> None:
    """Until the ready file names ``record``'s process; raise if it exits or time runs out."""
    ready = ready_file(run_dir)
    procs.wait_started(
        record,
        lambda: ready.exists() and json.loads(ready.read_text()).get("pid") == record.pid,
        expected=f"{ready} naming it",
        timeout_s=timeout_s,
        error=KubeletStartError,
    )
