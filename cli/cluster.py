"""Which cluster a command acts on when none is named: the running sandbox's, said aloud."""

from __future__ import annotations

import os
from pathlib import Path

import typer


def kubeconfig_or_sandbox(kubeconfig: Path | None) -> Path | None:
    """kubeconfig as given; when nothing names a cluster (no --kubeconfig, $KUBECONFIG,
    ~/.kube/config or in-cluster) and the sandbox runs, the sandbox's, with the export
    that makes it the default (and its Prefect with its credentials, when PREFECT_API_URL
    is unset)."""
    if (
        kubeconfig is not None
        or os.environ.get("KUBECONFIG")
        or os.environ.get("KUBERNETES_SERVICE_HOST")
        or (Path.home() / ".kube" / "config").is_file()
    ):
        return kubeconfig
    from sandbox import manager, prefect_server
    from sandbox.paths import default_run_dir

    state = manager.status(default_run_dir())
    if state is None or not state.kubeconfig.is_file():
        return None
    typer.echo(
        f"no kubeconfig given: using the running sandbox's ({state.kubeconfig}); "
        f"to make it the default: export KUBECONFIG={state.kubeconfig}",
        err=True,
    )
    if state.prefect_api_url and not os.environ.get("PREFECT_API_URL"):
        os.environ.update(prefect_server.client_env(state.run_dir, state.prefect_api_url))
    return state.kubeconfig
