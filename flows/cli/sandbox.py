"""`handoff sandbox` commands."""

import typer

app = typer.Typer(help="The embedded sandbox cluster.", no_args_is_help=True)
