"""`handoff sandbox up|down|status`: start, stop and describe the whole sandbox.

`up` is idempotent: a healthy sandbox is left alone; a stale run directory (state of
processes that are gone) is cleaned and started afresh. `down` stops exactly the
processes recorded in the state file and is harmless when nothing runs.
"""

from __future__ import annotations

import base64
import shutil
import sys
from pathlib import Path

import yaml

from sandbox import controlplane, prefect_server, procs
from sandbox.certs import ensure_pki
from sandbox.cluster import DEFAULT_CLUSTER_FILE
from sandbox.kubelet import launch
from sandbox.registry import Registry
from sandbox.state import SandboxState, locked, read_state, state_file, write_state

# A deadline, not a wait: a busy machine starts components slowly.
COMPONENT_READY_S = 180.0


class SandboxError(RuntimeError):
    """The sandbox could not be brought to the requested state."""


def up(
    run_dir: Path,
    *,
    attach: Path | None = None,
    cluster_file: Path = DEFAULT_CLUSTER_FILE,
    extra_args: dict[str, list[str]] | None = None,
    prefect_auth: bool = True,
    prefect_pair: str | None = None,
) -> tuple[SandboxState, bool]:
    """Ensure a sandbox runs in run_dir; return (state, started_now).

    attach: run the simulated nodes, proxy, registry and Prefect against the
    control plane of this kubeconfig instead of starting one. extra_args adds
    command-line flags per control-plane component name. prefect_auth: the Prefect
    server requires the sandbox's credentials (prefect_server.protect: `prefect_pair`,
    else made at random); off, it is open.
    """
    with locked(run_dir):
        state = read_state(run_dir)
        if state is not None and not state.dead_processes():
            return state, False
        if state is not None:
            _stop_all(state)
        _clean(run_dir)
        if prefect_auth:
            prefect_server.protect(run_dir, prefect_pair)
        state = _attached(run_dir, attach) if attach else _own_control_plane(run_dir, extra_args)
        try:
            _start_components(state, cluster_file)
        except BaseException:
            _stop_all(state)
            raise
        write_state(state)
        return state, True


def _own_control_plane(run_dir: Path, extra_args: dict[str, list[str]] | None) -> SandboxState:
    plane = controlplane.start(run_dir, extra_args)
    return SandboxState(
        run_dir=run_dir, kubeconfig=plane.kubeconfig, server=plane.server, control_plane=plane
    )


def _attached(run_dir: Path, kubeconfig: Path) -> SandboxState:
    """State for an existing control plane: its kubeconfig serves every component, and
    the kubelet accepts the apiserver's client certificate signed by the cluster's CA."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(
        c["context"] for c in config["contexts"] if c["name"] == config["current-context"]
    )
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    pki = ensure_pki(run_dir / "pki")
    if "certificate-authority-data" in cluster:
        pki.ca_crt.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    elif "certificate-authority" in cluster:
        pki.ca_crt.write_bytes(Path(cluster["certificate-authority"]).read_bytes())
    return SandboxState(run_dir=run_dir, kubeconfig=kubeconfig.resolve(), server=cluster["server"])


def _start_components(state: SandboxState, cluster_file: Path) -> None:
    """Start what runs beside the control plane: Prefect, registry, kubelet, service proxy.

    Each is recorded in `state` as soon as it is spawned, so a failure later in
    start-up still stops it.
    """
    prefect, state.prefect_api_url = prefect_server.spawn(state.run_dir)
    state.components.append(prefect)
    registry = Registry.start(state.run_dir)
    state.components.append(registry.process)
    state.registry_url = registry.url
    kubeconfig = state.run_dir / "etc" / "kubelet.kubeconfig"
    if state.control_plane is None:
        kubeconfig = state.kubeconfig
    state.components.append(
        launch.start(
            run_dir=state.run_dir,
            kubeconfig=kubeconfig,
            cluster=cluster_file,
            registry_url=registry.url,
            pki=state.run_dir / "pki",
        )
    )
    proxy = procs.spawn(
        "service-proxy",
        [
            sys.executable,
            "-m",
            "sandbox.proxy",
            "--run-dir",
            str(state.run_dir),
            "--kubeconfig",
            str(kubeconfig),
        ],
        state.run_dir / "logs" / "service-proxy.log",
    )
    state.components.append(proxy)
    _wait_file(proxy, state.run_dir / "proxy.json")
    prefect_server.wait_healthy(prefect, state.prefect_api_url)


def _wait_file(
    record: procs.ProcessRecord, path: Path, timeout_s: float = COMPONENT_READY_S
) -> None:
    """Wait until a component signals readiness by writing `path`; name it if it dies."""
    procs.wait_started(
        record,
        path.exists,
        expected=f"it to write {path}",
        timeout_s=timeout_s,
        error=SandboxError,
    )


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
