"""`handoff reconcile`: one pass of the reconciler (flows/reconcile.py), by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

console = Console()


def reconcile(
    specs_dir: Annotated[
        Path | None,
        typer.Option(
            "--specs-dir",
            help="Specs of a clone of the branch, whose HEAD is the head compared "
            "(default: $HANDOFF_SPECS_DIR, else manifests/handoffs).",
        ),
    ] = None,
    kubeconfig: Annotated[
        Path | None, typer.Option("--kubeconfig", help="Cluster whose Services are read.")
    ] = None,
    branch: Annotated[str, typer.Option(help="The branch the clone holds.")] = "main",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be started; start nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The decisions as JSON.")] = False,
) -> None:
    """Start the handoff of every spec whose head (spec, manifest, golden file) the
    Service's history does not show handed off, with no run of it active or queued and
    no gate failure of that head: the event a merge would have sent. Exit 1 when a spec
    could not be read."""
    from flows.errors import HandoffError
    from flows.reconcile import ReconcileError, api_url
    from flows.reconcile import reconcile as reconcile_once
    from flows.webhook.events import PrefectApiError

    try:
        decisions = reconcile_once(
            specs=specs_dir,
            kubeconfig=str(kubeconfig) if kubeconfig else None,
            api_url=api_url(),
            branch=branch,
            dry_run=dry_run,
        )
    except (ReconcileError, PrefectApiError, HandoffError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    if as_json:
        print(json.dumps([d.model_dump() for d in decisions], indent=2))
    else:
        table = Table("spec", "Service", "head", "action", "why")
        for d in decisions:
            done = "started" if d.started else "would start"
            table.add_row(
                d.spec, d.service, d.head[:12], done if d.action == "start" else d.action, d.reason
            )
        console.print(table)
    if any(d.spec == "-" for d in decisions):
        raise typer.Exit(1)
