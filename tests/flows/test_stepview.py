"""The step view: listeners hear each step start and end, and the table shows each step's
state and seconds in the flow's order, a rollback only when one ran."""

from __future__ import annotations

import io
import re

import pytest
from rich.cells import cell_len
from rich.console import Console

from flows.report.stepview import STEPS, StepEvent, StepView, listening, notify, shown_live


def rendered(view: StepView) -> str:
    console = Console(record=True, width=80, color_system=None)
    console.print(view)
    return console.export_text()


def rows(text: str) -> dict[str, list[str]]:
    """Step name → its other cells, in table order."""
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("│")]
    cells = [[c.strip() for c in line[1:-1].split("│")] for line in lines]
    return {c[0]: c[1:] for c in cells if len(c) == 3}


def test_listeners_hear_events_only_while_listening() -> None:
    heard: list[StepEvent] = []
    with listening(heard.append):
        notify(StepEvent("warm", "started"))
        notify(StepEvent("warm", "done", 1.25))
    notify(StepEvent("gates", "started"))
    assert heard == [StepEvent("warm", "started"), StepEvent("warm", "done", 1.25)]


def test_the_table_shows_each_step_in_order_with_its_state() -> None:
    view = StepView()
    with listening(view):
        for name, seconds in [("wait-for-image", 3.04), ("approve-plan", 0.0)]:
            notify(StepEvent(name, "started"))
            notify(StepEvent(name, "done", seconds))
        notify(StepEvent("apply-at-zero", "started"))
        notify(StepEvent("apply-at-zero", "failed", 0.5))
        notify(StepEvent("rollback", "started"))
    table = rows(rendered(view))
    assert list(table) == [*STEPS, "rollback"]
    assert table["wait-for-image"] == ["done", "3.0"]
    assert table["apply-at-zero"] == ["failed", "0.5"]
    assert table["warm"] == ["pending", ""]
    assert table["rollback"][0] == "running"


def glued(text: str) -> list[str]:
    """Lines on which a box's bottom border goes on with text: the next print began on it."""
    return [line for line in text.splitlines() if re.search(r"[┘╯]\s*\S", line)]


@pytest.mark.parametrize("terminal", [False, True], ids=["file", "terminal"])
@pytest.mark.parametrize("width", [80, 120])
def test_the_live_table_ends_its_line_so_the_next_print_starts_a_new_one(
    width: int, terminal: bool
) -> None:
    """A pipe or a file (the demo's output captured) and a terminal that is not redrawn:
    the table's bottom border is a line of its own, the lines fit the width."""
    screen = io.StringIO()
    console = Console(
        file=screen,
        width=width,
        color_system=None,
        force_terminal=terminal,
        force_interactive=False,
    )
    for spec in ("clef-candle", "coder-14b-fp16"):
        with shown_live(console, title=f"handoff {spec}"):
            for name in STEPS[:3]:
                notify(StepEvent(name, "started"))
                if name == STEPS[0]:  # the demo prints the run's link as a step starts
                    console.print(f"handoff {spec}: http://127.0.0.1:4200/runs/flow-run/1")
                notify(StepEvent(name, "done", 1.5))
        console.print(f"after {spec}")
    shown = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", screen.getvalue())  # cursor on/off
    lines = shown.splitlines()
    assert not glued(shown), shown
    assert all(cell_len(line) <= width for line in lines), shown
    for spec in ("clef-candle", "coder-14b-fp16"):
        after = lines.index(f"after {spec}")
        assert lines[after - 1].startswith("└") and lines[after - 1].endswith("┘"), shown
    assert lines[lines.index("after clef-candle") + 1] == (
        "handoff coder-14b-fp16: http://127.0.0.1:4200/runs/flow-run/1"
    )
    assert shown.count("done") == 6 and shown.endswith("after coder-14b-fp16\n")
