"""The sandbox's run state, one JSON file in the run directory.

Written after a successful `up` and read by `status`, `down` and the test fixture,
so any process can find and stop exactly what `up` started.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from sandbox import procs
from sandbox.controlplane import ControlPlane


class SandboxState(BaseModel):
    run_dir: Path
    kubeconfig: Path
    server: str
    # None when attached to a control plane this sandbox did not start.
    control_plane: ControlPlane | None = None
    registry_url: str | None = None
    prefect_api_url: str | None = None
    components: list[procs.ProcessRecord] = Field(default_factory=list)

    def all_processes(self) -> list[procs.ProcessRecord]:
        plane = self.control_plane.processes if self.control_plane else []
        return [*plane, *self.components]

    def dead_processes(self) -> list[procs.ProcessRecord]:
        return [p for p in self.all_processes() if not procs.is_alive(p)]


def state_file(run_dir: Path) -> Path:
    return run_dir / "state.json"


def read_state(run_dir: Path) -> SandboxState | None:
    path = state_file(run_dir)
    if not path.exists():
        return None
    try:
        return SandboxState.model_validate_json(path.read_text())
    except ValueError:
        return None


def write_state(state: SandboxState) -> None:
    path = state_file(state.run_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state.model_dump_json(indent=2))
    tmp.replace(path)


@contextlib.contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Serialise up/down on one run directory across processes."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f".{run_dir.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
