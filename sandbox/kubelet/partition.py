"""A node cut off from the API server, as a fault to inject.

While ``RUN_DIR/kubelet/partitioned/NODE`` exists, the kubelet posts nothing about NODE:
no heartbeat, no Lease renewal, no pod status, as a real kubelet that lost its link to
the API server (or died). Its containers run on. The node controller then marks the
node NotReady once its grace period (40 s) passes without a heartbeat, as it would a
real lost node. Removing the file heals it: the next heartbeat posts Ready again and
each pod's status is posted afresh. Pod deletions still go through, so a test's
clean-up is not held up by it.
"""

from __future__ import annotations

from pathlib import Path


def marker(kubelet_dir: Path, node: str) -> Path:
    return kubelet_dir / "partitioned" / node


def is_partitioned(kubelet_dir: Path, node: str | None) -> bool:
    return node is not None and marker(kubelet_dir, node).exists()


def set_partitioned(kubelet_dir: Path, node: str, cut: bool) -> None:
    path = marker(kubelet_dir, node)
    if cut:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    else:
        path.unlink(missing_ok=True)
