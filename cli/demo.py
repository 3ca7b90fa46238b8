"""`handoff demo`: the seeds' two handoffs on the sandbox, with a summary."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from cli.demo_run import DemoResult

# A table of nine columns needs more than the 80 columns rich assumes off a terminal.
console = Console(width=None if Console().is_terminal else 120)


def demo(
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Sandbox state directory.")
    ] = None,
    approve_in_ui: Annotated[
        bool,
        typer.Option(
            "--approve-in-ui",
            help="Pause for approval in the Prefect UI instead of auto-approving.",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", help="Show Prefect's log lines here instead of in a file."),
    ] = False,
) -> None:
    """Bring the sandbox up and run the clef-candle and coder-14b-fp16 handoffs, each
    with its live step table, then a summary."""
    import os

    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from cli import demo_run
    from sandbox import manager
    from sandbox.paths import default_run_dir

    run_dir = (run_dir or default_run_dir()).resolve()
    results = demo_run.main(
        run_dir, auto_approve=not approve_in_ui, console=console, verbose=verbose
    )
    console.print(summary(results))
    # The hints name this sandbox, so they work as printed from any shell.
    state = manager.status(run_dir)
    typer.echo("history:")
    if state is not None:
        typer.echo(f'  eval "$(uv run handoff sandbox env --run-dir {run_dir})"')
    typer.echo(f"  uv run handoff history --namespace {demo_run.NAMESPACE}")
    if not verbose:
        typer.echo(f"Prefect's log lines: {demo_run.log_file(run_dir)}")
    typer.echo("stop the sandbox:")
    typer.echo(f"  uv run handoff sandbox down --run-dir {run_dir}")
    if any(r.outcome != "done" for r in results):
        raise typer.Exit(1)


def summary(results: list[DemoResult]) -> Table:
    """One row per handoff: its outcome, the clients' view and the downtime."""
    table = Table(
        "handoff",
        "outcome",
        "strategy",
        "requests ok",
        "failed",
        "unavailable (s)",
        "no endpoints (s)",
        "declared (s)",
        "took (s)",
    )
    for r in results:
        declared = (
            "-"
            if r.declared_downtime_s is None
            else f"~{r.declared_estimate_s or 0:.0f}, <= {r.declared_downtime_s:.0f}"
        )
        measured = "-" if r.measured_downtime_s is None else f"{r.measured_downtime_s:g}"
        table.add_row(
            r.spec,
            r.outcome,
            r.strategy or "-",
            str(r.requests_ok),
            str(r.requests_failed),
            f"{r.unavailable_s:g}",
            measured,
            declared,
            f"{r.seconds:g}",
        )
    return table
