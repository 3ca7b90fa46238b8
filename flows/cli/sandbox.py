"""`handoff sandbox up|status|down`: the embedded sandbox cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="The embedded sandbox cluster (real control plane, simulated nodes).", no_args_is_help=True
)
console = Console()

RunDir = Annotated[
    Path | None,
    typer.Option(
        "--run-dir",
        help="Where the sandbox keeps its state "
        "(default: $HANDOFF_SANDBOX_DIR or ~/.local/state/handoff/sandbox).",
    ),
]


def _run_dir(run_dir: Path | None) -> Path:
    from sandbox.paths import default_run_dir

    return (run_dir or default_run_dir()).resolve()


@app.command()
def up(run_dir: RunDir = None) -> None:
    """Start the sandbox (harmless when it already runs) and print its kubeconfig."""
    from sandbox import manager
    from sandbox.controlplane import ControlPlaneError

    try:
        state, started = manager.up(_run_dir(run_dir))
    except (ControlPlaneError, manager.SandboxError, FileNotFoundError) as exc:
        console.print(f"[red]sandbox up failed:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print("sandbox started" if started else "sandbox already running")
    console.print(f"kubeconfig: {state.kubeconfig}")
    typer.echo(f"export KUBECONFIG={state.kubeconfig}")


@app.command()
def status(run_dir: RunDir = None) -> None:
    """Show the sandbox's processes, API server, registry and service addresses."""
    from sandbox import manager, procs

    state = manager.status(_run_dir(run_dir))
    if state is None:
        console.print("sandbox is not running")
        raise typer.Exit(1)
    table = Table("component", "pid", "state", "log")
    for record in state.all_processes():
        alive = procs.is_alive(record)
        table.add_row(
            record.name, str(record.pid), "running" if alive else "[red]dead[/red]", str(record.log)
        )
    console.print(table)
    console.print(f"API server: {state.server}")
    console.print(f"kubeconfig: {state.kubeconfig}")
    if state.registry_url:
        console.print(f"registry: {state.registry_url}")
    if state.dead_processes():
        console.print(
            "[yellow]some processes are gone: run `handoff sandbox up` to restart[/yellow]"
        )
        raise typer.Exit(1)


@app.command()
def down(run_dir: RunDir = None) -> None:
    """Stop every process the sandbox started (harmless when nothing runs)."""
    from sandbox import manager

    stopped = manager.down(_run_dir(run_dir))
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
