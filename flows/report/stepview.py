"""The handoff's steps as they happen, for a terminal: `handoff run` shows a live table.

Each timed step (flows/tasks.py) reports its start and end to the listeners registered
here; the view keeps one row per step with its state and seconds (a running step counts
up, so a wait for the image or for an approval is visibly a wait).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from rich.console import Console
from rich.live import Live
from rich.table import Table

State = Literal["started", "done", "failed"]
# The flow's order (flows/handoff.py); rollback appears only when it runs.
STEPS = (
    "wait-for-image",
    "approve-plan",
    "apply-at-zero",
    "warm",
    "gates",
    "approve",
    "swap",
    "scale-up",
    "bake",
    "retire",
)


@dataclass(frozen=True)
class StepEvent:
    name: str
    state: State
    seconds: float | None = None  # for done and failed


Listener = Callable[[StepEvent], None]
_listeners: list[Listener] = []
_lock = threading.Lock()


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Call `listener` with every step event in this process while the block runs."""
    with _lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(listener)


def notify(event: StepEvent) -> None:
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        listener(event)


class StepView:
    """One row per step: pending, running (seconds so far), done or failed (seconds)."""

    def __init__(self, title: str = "handoff steps") -> None:
        self.title = title
        self._rows: dict[str, tuple[str, float | None, float]] = {
            name: ("pending", None, 0.0) for name in STEPS
        }

    def __call__(self, event: StepEvent) -> None:
        if event.state == "started":
            self._rows[event.name] = ("running", None, time.monotonic())
        else:
            self._rows[event.name] = (event.state, event.seconds, 0.0)

    def __rich__(self) -> Table:
        table = Table(title=self.title, title_justify="left")
        table.add_column("step")
        table.add_column("state")
        table.add_column("s", justify="right")
        styles = {"running": "yellow", "done": "green", "failed": "red", "pending": "dim"}
        for name, (state, seconds, started) in list(self._rows.items()):  # flow thread adds
            if state == "running":
                seconds = time.monotonic() - started
            shown = "" if seconds is None else f"{seconds:.1f}"
            table.add_row(name, f"[{styles[state]}]{state}[/]", shown)
        return table


@contextmanager
def shown_live(console: Console, title: str = "handoff steps") -> Iterator[StepView]:
    """The step table, redrawn on `console` while the block runs; left printed after."""
    view = StepView(title)
    try:
        with Live(view, console=console, refresh_per_second=4), listening(view):
            yield view
    finally:
        # Live leaves the cursor on the table's bottom border, and moves it to the next
        # line only on a terminal: in a file or a pipe the next print would start there.
        if not console.is_terminal and not console.is_jupyter:
            console.line()
