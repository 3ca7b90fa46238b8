"""The `handoff` command line.

Each command group lives in its own module; heavy imports (prefect, kubernetes, numpy)
happen inside the commands so that `handoff --help` stays fast.
"""

from __future__ import annotations

import inspect
import re

import typer
from typer.models import CommandInfo

from cli import demo, gate, golden, handoff, image, rbac, reconcile, sandbox, webhook, workpool

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
app.add_typer(rbac.app, name="rbac")
app.add_typer(workpool.app, name="work-pool")
for command in (
    demo.demo,
    handoff.plan,
    handoff.run,
    handoff.approve,
    handoff.rollback,
    handoff.history,
    reconcile.reconcile,
    handoff.keygen,
):
    app.command()(command)

# A line that starts its own line in any terminal: a list item or an indented block.
_KEPT_LINE = re.compile(r"\s|[-*•] |\d+[.)] ")


def unwrapped(text: str | None) -> str | None:
    """TEXT with each paragraph's hard line breaks made spaces, so that the help wraps at
    the terminal's width, not where the docstring broke its lines; blank lines, list
    items, indented lines and click's `\\b` (no rewrap) paragraphs are kept."""
    if text is None:
        return None
    paragraphs = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        if paragraph.startswith("\b"):
            paragraphs.append(paragraph)
            continue
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not _KEPT_LINE.match(line):
                lines[-1] = f"{lines[-1].rstrip()} {line.strip()}"
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def _help_of(info: CommandInfo) -> str | None:
    return unwrapped(info.help if info.help is not None else inspect.getdoc(info.callback))


def unwrap_helps(group: typer.Typer) -> None:
    """Every command's and group's help in GROUP, unwrapped (typer's rich help keeps a
    docstring's single line breaks)."""
    if isinstance(group.info.help, str):  # else typer's placeholder: the callback's docstring
        group.info.help = unwrapped(group.info.help)
    for command in group.registered_commands:
        command.help = _help_of(command)
    for sub in group.registered_groups:
        if isinstance(sub.help, str):
            sub.help = unwrapped(sub.help)
        if sub.typer_instance is not None:
            unwrap_helps(sub.typer_instance)


unwrap_helps(app)


def main() -> None:
    app()
