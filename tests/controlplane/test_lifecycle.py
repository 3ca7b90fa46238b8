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


@pytest.mark.slow  # a whole control plane killed and brought up again: about a minute
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


@pytest.mark.slow  # two control planes up and down; every sandbox test brings one up
def test_cli_up_twice_status_down_twice(tmp_path: Path) -> None:
    run_dir = tmp_path / "sb"
    cli = [sys.executable, "-m", "cli", "sandbox"]

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli, *args, "--run-dir", str(run_dir)], capture_output=True, text=True
        )

    try:
        first = call("up")
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"export KUBECONFIG={run_dir / 'kubeconfig'}" in first.stdout
        started = manager.status(run_dir)
        assert started is not None
        again = call("up")
        assert again.returncode == 0 and "already running" in again.stdout
        assert manager.status(run_dir) == started
        status = call("status")
        assert status.returncode == 0
        for name in ("kube-apiserver", "kubelet", "registry", "service-proxy", "prefect-server"):
            assert name in status.stdout
    finally:
        down = call("down")
    assert "stopped:" in down.stdout
    assert not any(procs.is_alive(p) for p in started.all_processes())
    assert not _model_servers_of(run_dir)
    assert "nothing was running" in call("down").stdout
    gone = call("status")
    assert gone.returncode == 1 and "not running" in gone.stdout


def _model_servers_of(run_dir: Path) -> list[int]:
    """Processes whose command line names this run directory (none may outlive down)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(run_dir) in cmdline:
                found.append(int(proc.name))
    return found
