"""`handoff --help` and each command's help, as a person sees them at 80 and 120 columns:
help texts wrap where the terminal does, not where a docstring broke its lines."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from itertools import pairwise

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from cli import app, unwrapped

WIDTHS = (80, 120)
LIST_ITEM = re.compile(r"[-*•] |\d+[.)] ")


def _commands() -> Iterator[list[str]]:
    """The path of every group and command, the root's ([]) first."""

    def walk(command: object, path: list[str]) -> Iterator[list[str]]:
        yield path
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(app), [])


COMMANDS = list(_commands())


def _help(path: list[str], width: int) -> list[str]:
    result = CliRunner().invoke(
        app, [*path, "--help"], env={"COLUMNS": str(width)}, terminal_width=width
    )
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def _command_list(lines: list[str]) -> dict[str, tuple[int, list[str]]]:
    """The Commands panel: each command's help lines, and the cells they may fill."""
    rows: dict[str, tuple[int, list[str]]] = {}
    inside, name = False, ""
    for line in lines:
        if line.startswith("╭─ Commands"):
            inside = True
        elif inside and line.startswith("╰"):
            inside = False
        elif inside:
            close = line.rindex("│")
            row = re.match(r"│ (\S+)?(\s+)(.*)", line[:close])
            assert row is not None, line
            start = len(line[:close]) - len(row.group(3))
            name = row.group(1) or name
            width, texts = rows.get(name, (close - 1 - start, []))
            rows[name] = (width, [*texts, row.group(3).rstrip()])
    return rows


def _description(lines: list[str]) -> list[list[str]]:
    """The paragraphs under the usage line, before the first panel."""
    paragraphs: list[list[str]] = [[]]
    usage = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:"))
    for line in lines[usage + 1 :]:
        if line.startswith("╭"):
            break
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def _broken_early(lines: list[str], width: int) -> list[str]:
    """Lines that end where the next line's first word would still have fitted: a break
    the terminal did not make (a list item starts its own line on purpose)."""
    return [
        f"{line!r} before {after!r}"
        for line, after in pairwise(lines)
        if after.strip()
        and not LIST_ITEM.match(after)
        and len(line) + 1 + len(after.split()[0]) <= width
    ]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "handoff")
def test_help_wraps_at_the_terminal_width(path: list[str], width: int) -> None:
    lines = _help(path, width)
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    for name, (cells, texts) in _command_list(lines).items():
        assert not _broken_early(texts, cells), (name, texts)
    for paragraph in _description(lines):
        assert not _broken_early(paragraph, width - 2), paragraph


@pytest.mark.parametrize("width", WIDTHS)
def test_the_demo_help_is_one_paragraph_in_the_command_list(width: int) -> None:
    """The demo's docstring breaks its first paragraph after "each"; the list does not."""
    from cli.demo import demo

    docstring = inspect.getdoc(demo) or ""
    assert "each\nwith" in docstring  # the break this test is about
    cells, texts = _command_list(_help([], width))["demo"]
    assert " ".join(texts) == " ".join(docstring.split())
    assert not _broken_early(texts, cells)


def test_unwrapped_joins_a_paragraphs_lines_and_keeps_paragraphs_and_lists() -> None:
    text = """First line
    goes on.

    Items:
    - one
      still one
    - two
    """
    assert unwrapped(text) == "First line goes on.\n\nItems:\n- one\n  still one\n- two"
    assert unwrapped("\b\nkept\nas is") == "\b\nkept\nas is"
    assert unwrapped(None) is None
