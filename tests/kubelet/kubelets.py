"""Start a kubelet process as the sandbox manager does, and wait until it is ready."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from sandbox import procs

READY_TIMEOUT_S = 60.0


def start_kubelet(
    *, run_dir: Path, kubeconfig: Path, cluster: Path, registry_url: str, pki: Path
) -> procs.ProcessRecord:
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
        "--pki",
        str(pki),
    ]
    record = procs.spawn("kubelet", argv, run_dir / "logs" / "kubelet.log")
    try:
        wait_ready(run_dir, record)
    except BaseException:
        procs.stop(record)
        raise
    return record


def wait_ready(run_dir: Path, record: procs.ProcessRecord) -> None:
    """Until ``run_dir/kubelet/ready.json`` names this process; fail if it exits first."""
    ready = run_dir / "kubelet" / "ready.json"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if not procs.is_alive(record):
            raise AssertionError(f"kubelet exited during start-up:\n{procs.log_tail(record.log)}")
        if ready.exists() and json.loads(ready.read_text()).get("pid") == record.pid:
            return
        time.sleep(0.1)
    raise AssertionError(
        f"kubelet not ready after {READY_TIMEOUT_S} s (no {ready}):\n{procs.log_tail(record.log)}"
    )
