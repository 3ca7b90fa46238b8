"""`handoff image` commands."""

import typer

app = typer.Typer(help="image commands", no_args_is_help=True)
