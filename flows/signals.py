"""A cancellation (SIGTERM, as a Prefect worker sends, or SIGINT) held back across the
ledger's first write, and delivered where the run rolls back: one that met the write
mid-request would otherwise leave the ledger written and the run gone, not rolled back.

And a cancellation noted, so it cannot be lost: Prefect's handler raises
TerminationSignal wherever the main thread happens to be, and an exception raised while
Python runs a finalizer (`__del__`, a weakref callback) is printed and dropped. Seen on a
loaded machine: a run SIGTERMed mid-handoff went on to `done`. Each step checks the note
before and after itself (flows/tasks.py), so the run rolls back at the next step at the
latest.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from prefect.exceptions import TerminationSignal

HELD = (signal.SIGTERM, signal.SIGINT)
_noted: list[int] = []  # the cancellations this process received while noting


@contextmanager
def noted() -> Iterator[None]:
    """Note SIGTERM and SIGINT, then hand each to the handler in place before (Prefect's
    raises TerminationSignal, Python's SIGINT handler KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.getsignal(number) for number in HELD}

    def note(number: int, frame: FrameType | None) -> None:
        _noted.append(number)
        handler = previous[signal.Signals(number)]
        if callable(handler):
            handler(number, frame)
        elif handler == signal.SIG_DFL:  # no handler of Python's: the default, at once
            signal.signal(number, signal.SIG_DFL)
            signal.raise_signal(number)

    for number in HELD:
        signal.signal(number, note)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _noted.clear()


def check() -> None:
    """Raise the cancellation this process received, if its handler's raise was lost."""
    if not _noted:
        return
    if _noted[0] == signal.SIGINT:
        raise KeyboardInterrupt
    raise TerminationSignal(signal=_noted[0])


@contextmanager
def held() -> Iterator[list[int]]:
    """Keep the signals that come during the block in the list yielded, for deliver();
    their handlers are back once it ends (if it ends in an error, the run ends with that
    one). Only the main thread catches signals: elsewhere nothing is held."""
    pending: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    previous = {number: signal.signal(number, lambda n, _: pending.append(n)) for number in HELD}
    try:
        yield pending
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def deliver(pending: list[int]) -> None:
    """Raise each held signal again, to the handler that is back (Prefect's raises
    TerminationSignal, SIGINT's KeyboardInterrupt)."""
    while pending:
        signal.raise_signal(pending.pop(0))
