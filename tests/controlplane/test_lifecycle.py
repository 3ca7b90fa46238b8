"""`handoff sandbox up|down` start and stop exactly their own processes: `up` twice
is harmless, a stale run directory is restarted cleanly, a component that dies at
start is named with its log, `down` with nothing running is harmless."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import manager, procs
from sandbox.controlplane import ControlPlaneError

pytestmark = pytest.mark.timeout(180)


def test_up_twice_then_down(tmp_path: Path) -> None:
    first, started = manager.up(tmp_path / "sb")
    try:
        assert started
        second, started_again = manager.up(tmp_path / "sb")
        assert not started_again
        assert [p.pid for p in second.all_processes()] == [p.pid for p in first.all_processes()]
    finally:
        stopped = manager.down(tmp_path / "sb")
    assert set(stopped) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
    assert not any(procs.is_alive(p) for p in first.all_processes())
    assert manager.down(tmp_path / "sb") == []


def test_stale_run_directory_is_restarted(tmp_path: Path) -> None:
    run_dir = tmp_path / "sb"
    old, _ = manager.up(run_dir)
    try:
        apiserver = next(p for p in old.all_processes() if p.name == "kube-apiserver")
        os.kill(apiserver.pid, signal.SIGKILL)
        new, started = manager.up(run_dir)
        assert started
        assert not any(procs.is_alive(p) for p in old.all_processes())
        assert all(procs.is_alive(p) for p in new.all_processes())
    finally:
        manager.down(run_dir)


def test_component_dying_at_start_is_named_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError) as info:
        manager.up(tmp_path / "sb", extra_args={"kube-apiserver": ["--no-such-flag"]})
    message = str(info.value)
    assert "kube-apiserver exited during start-up" in message
    assert "unknown flag: --no-such-flag" in message
    # Nothing of that attempt is left running.
    assert manager.status(tmp_path / "sb") is None


def test_refuses_to_wipe_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(manager.SandboxError, match="not made by the sandbox"):
        manager.up(tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_cli_prints_kubeconfig_export(tmp_path: Path) -> None:
    run_dir = tmp_path / "sb"
    cli = [sys.executable, "-m", "flows.cli", "sandbox"]
    try:
        out = subprocess.run(
            [*cli, "up", "--run-dir", str(run_dir)], capture_output=True, text=True, check=True
        ).stdout
        assert f"export KUBECONFIG={run_dir / 'kubeconfig'}" in out
        status = subprocess.run(
            [*cli, "status", "--run-dir", str(run_dir)], capture_output=True, text=True
        )
        assert status.returncode == 0 and "kube-apiserver" in status.stdout
    finally:
        down = subprocess.run(
            [*cli, "down", "--run-dir", str(run_dir)], capture_output=True, text=True, check=True
        ).stdout
    assert "stopped:" in down
    gone = subprocess.run(
        [*cli, "status", "--run-dir", str(run_dir)], capture_output=True, text=True
    )
    assert gone.returncode == 1 and "not running" in gone.stdout
