"""The `handoff` command line.

Each command group lives in its own module; heavy imports (prefect, kubernetes, numpy)
happen inside the commands so that `handoff --help` stays fast.
"""

from __future__ import annotations

import typer

from cli import demo, gate, golden, handoff, image, sandbox, webhook

app = typer.Typer(
    name="handoff",
    help="Move a client-facing Kubernetes Service from one LLM model server to another, "
    "refusing a candidate that answers wrongly or slowly.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(sandbox.app, name="sandbox")
app.add_typer(gate.app, name="gate")
app.add_typer(golden.app, name="golden")
app.add_typer(image.app, name="image")
app.add_typer(webhook.app, name="webhook")
for command in (
    demo.demo,
    handoff.plan,
    handoff.run,
    handoff.approve,
    handoff.rollback,
    handoff.history,
):
    app.command()(command)


def main() -> None:
    app()
