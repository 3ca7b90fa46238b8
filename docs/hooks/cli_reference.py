"""The CLI reference page, rendered at build time from the `handoff` command itself.

Typer builds a click command tree (`typer.main.get_command`, on typer's own copy of
click); each command's usage, help, arguments and options come from that tree, so the page
cannot drift from `--help`.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

MARKER = "<!-- cli-reference -->"


def _options(command: Any, ctx: typer.Context) -> list[str]:
    rows = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:  # hidden
            continue
        name, text = record
        cell = " ".join(text.split()).replace("|", r"\|")
        rows.append(f"| `{name}` | {cell} |")
    return ["| argument / option | meaning |", "| --- | --- |", *rows] if rows else []


def render(command: Any, ctx: typer.Context, depth: int = 2) -> list[str]:
    """COMMAND and every command under it, as Markdown: a heading per command path."""
    hidden = getattr(command, "hidden", False)
    if hidden:
        return []
    lines = [f"{'#' * min(depth, 4)} `{ctx.command_path}`", ""]
    lines += ["```text", command.get_usage(ctx), "```", ""]
    if command.help:
        lines += [command.help.replace("\b\n", "").strip(), ""]
    options = _options(command, ctx)
    if options:
        lines += [*options, ""]
    if isinstance(command, TyperGroup):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                lines += render(sub, typer.Context(sub, info_name=name, parent=ctx), depth + 1)
    return lines


def reference() -> str:
    from cli import app  # the project's own CLI, imported only when the docs are built

    root = typer.main.get_command(app)
    return "\n".join(render(root, typer.Context(root, info_name="handoff")))


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, reference())
    return markdown
