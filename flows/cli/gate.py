"""`handoff gate` commands."""

import typer

app = typer.Typer(help="gate commands", no_args_is_help=True)
