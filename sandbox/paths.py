"""Where the sandbox keeps its build cache and its run state.

Build outputs (the control-plane binaries) live in the user's cache, keyed by the
Kubernetes source version, so a second set-up never rebuilds. Run state (certs,
etcd data, logs, pid files, kubeconfig) lives in one run directory per sandbox.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

K8S_SOURCE_VERSION = "1.20.5+really1.20.2"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("HANDOFF_CACHE", Path(base) / "handoff"))


def k8s_bin_dir() -> Path:
    return cache_dir() / f"kubernetes-{K8S_SOURCE_VERSION}" / "bin"


def k8s_binary(name: str) -> Path:
    path = k8s_bin_dir() / name
    if not path.is_file():
        raise FileNotFoundError(
            f"control-plane binary {name} not found at {path}: "
            "run sandbox/setup.sh once to build it from Debian's kubernetes source package"
        )
    return path


def default_run_dir() -> Path:
    if "HANDOFF_SANDBOX_DIR" in os.environ:
        return Path(os.environ["HANDOFF_SANDBOX_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "handoff" / "sandbox"


def made_once(path: Path, make: Callable[[], None]) -> Path:
    """`path`, made by `make` where it is missing, safe across processes: one maker at a
    time in its directory (an flock on `.lock` there), the others wait and reuse what it
    made. `make` leaves `path` whole or not at all."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():
            make()
    return path
