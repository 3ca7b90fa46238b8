"""`handoff sandbox up|status|down`: the embedded sandbox cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from cli.modelserver import model_server

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
def up(
    run_dir: RunDir = None,
    attach: Annotated[
        Path | None,
        typer.Option(
            "--attach",
            help="Run the simulated nodes, proxy, registry and Prefect "
            "against this kubeconfig's control plane instead of starting one.",
        ),
    ] = None,
) -> None:
    """Start the sandbox (harmless when it already runs) and print its kubeconfig."""
    from sandbox import manager

    try:
        state, started = manager.up(_run_dir(run_dir), attach=attach)
    except (RuntimeError, FileNotFoundError) as exc:
        console.print(f"[red]sandbox up failed:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print("sandbox started" if started else "sandbox already running")
    console.print(f"kubeconfig: {state.kubeconfig}")
    typer.echo(f"export KUBECONFIG={state.kubeconfig}")
    _print_prefect_hint(state.run_dir)


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
    if state.prefect_api_url:
        console.print(f"Prefect UI: {state.prefect_api_url.removesuffix('/api')}")
        _print_prefect_hint(state.run_dir)
    _print_services(state.run_dir)
    if state.dead_processes():
        console.print(
            "[yellow]some processes are gone: run `handoff sandbox up` to restart[/yellow]"
        )
        raise typer.Exit(1)


def _print_prefect_hint(run_dir: Path) -> None:
    """Where the Prefect credentials are, never the secret itself (this output is logged)."""
    from sandbox.prefect_server import auth_file

    if auth_file(run_dir).is_file():
        console.print(
            f"Prefect requires the user:password in {auth_file(run_dir)} (the UI asks for it); "
            f'for prefect and handoff commands: eval "$(handoff sandbox env --run-dir {run_dir})"'
        )


def _print_services(run_dir: Path) -> None:
    from sandbox.proxy import read_addresses

    addresses = read_addresses(run_dir)
    if not addresses:
        return
    table = Table("namespace", "service", "port", "reach it at")
    for a in addresses:
        table.add_row(a.namespace, a.service, str(a.port), f"http://{a.address}")
    console.print(table)


@app.command()
def env(run_dir: RunDir = None) -> None:
    """Print shell exports for the running sandbox: `eval "$(handoff sandbox env)"`
    (KUBECONFIG, and PREFECT_API_URL with the PREFECT_API_AUTH_STRING its Prefect requires)."""
    import shlex

    from sandbox import manager, prefect_server

    state = manager.status(_run_dir(run_dir))
    if state is None:
        console.print("sandbox is not running: `handoff sandbox up`", style="red")
        raise typer.Exit(1)
    typer.echo(f"export KUBECONFIG={state.kubeconfig}")
    if state.prefect_api_url:
        for name, value in prefect_server.client_env(state.run_dir, state.prefect_api_url).items():
            typer.echo(f"export {name}={shlex.quote(value)}")


@app.command()
def down(run_dir: RunDir = None) -> None:
    """Stop every process the sandbox started (harmless when nothing runs)."""
    from sandbox import manager

    stopped = manager.down(_run_dir(run_dir))
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


app.command("model-server")(model_server)
