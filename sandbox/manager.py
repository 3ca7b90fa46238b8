"""`handoff sandbox up|down|status`: start, stop and describe the whole sandbox.

`up` is idempotent: a healthy sandbox is left alone; a stale run directory (state of
processes that are gone) is cleaned and started afresh. `down` stops exactly the
processes recorded in the state file and is harmless when nothing runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sandbox import controlplane, procs
from sandbox.state import SandboxState, locked, read_state, state_file, write_state


class SandboxError(RuntimeError):
    """The sandbox could not be brought to the requested state."""


def up(
    run_dir: Path, *, extra_args: dict[str, list[str]] | None = None
) -> tuple[SandboxState, bool]:
    """Ensure a sandbox runs in run_dir; return (state, started_now).

    extra_args adds command-line flags per control-plane component name.
    """
    with locked(run_dir):
        state = read_state(run_dir)
        if state is not None and not state.dead_processes():
            return state, False
        if state is not None:
            _stop_all(state)
        _clean(run_dir)
        plane = controlplane.start(run_dir, extra_args)
        state = SandboxState(
            run_dir=run_dir, kubeconfig=plane.kubeconfig, server=plane.server, control_plane=plane
        )
        try:
            _start_components(state)
        except BaseException:
            _stop_all(state)
            raise
        write_state(state)
        return state, True


def _start_components(state: SandboxState) -> None:
    """Start what runs beside the control plane (registry, kubelet, service proxy)."""


def down(run_dir: Path) -> list[str]:
    """Stop everything recorded for run_dir; return the names that were running."""
    with locked(run_dir):
        state = read_state(run_dir)
        if state is None:
            return []
        stopped = _stop_all(state)
        state_file(run_dir).unlink(missing_ok=True)
        return stopped


def status(run_dir: Path) -> SandboxState | None:
    return read_state(run_dir)


def _stop_all(state: SandboxState) -> list[str]:
    # Components first: the kubelet must stop its pods while the apiserver still answers.
    stopped = [p.name for p in reversed(state.components) if procs.stop(p)]
    if state.control_plane is not None:
        stopped += controlplane.stop(state.control_plane)
    return stopped


_MARKER = ".handoff-sandbox"


def _clean(run_dir: Path) -> None:
    """Remove the state of an earlier run (etcd data, logs, run files); keep nothing stale.

    Only a directory the sandbox made (it holds the marker file) or an empty one is
    wiped, so a mistyped --run-dir never deletes someone's files.
    """
    if run_dir.exists() and any(run_dir.iterdir()):
        if not (run_dir / _MARKER).exists():
            raise SandboxError(
                f"run directory {run_dir} is not empty and was not made by the sandbox "
                f"(no {_MARKER} file): choose another --run-dir or empty it"
            )
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / _MARKER).touch()
