"""The step view: listeners hear each step start and end, and the table shows each step's
state and seconds in the flow's order, a rollback only when one ran."""

from __future__ import annotations

from rich.console import Console

from flows.report.stepview import STEPS, StepEvent, StepView, listening, notify


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
