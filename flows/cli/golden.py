"""`handoff golden` commands."""

import typer

app = typer.Typer(help="golden commands", no_args_is_help=True)
