"""A cancellation (SIGTERM, as a Prefect worker sends, or SIGINT) held back where raising
it would leave the cluster other than the run believes: across a fenced write
(flows/kube/client.py), whose effect must be known before the rollback decides, and from
before the ledger's first write until the steps begin (flows/session.py, delivered in
flows/handoff.py), where the rollback takes over: one that met the write, or came between
its answer and the steps, would otherwise leave the ledger written and the run gone, not
rolled back.

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
from typing import Any

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


class Held(list[int]):
    """The cancellations held back so far, and the handlers to put back when the hold ends."""

    def __init__(self) -> None:
        super().__init__()
        self._previous: dict[int, Any] = {}

    def hook(self, number: int) -> None:
        """Hold `number` from now on; the swap is recorded as it is made, so a raise that
        cuts into a hold's set-up leaves nothing swapped once release() has run."""
        self._previous[number] = signal.signal(number, lambda n, _: self.append(n))

    def release(self) -> None:
        """End the hold: the handlers in place before are back (once)."""
        previous, self._previous = self._previous, {}
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def held() -> Iterator[Held]:
    """Keep the signals that come from the block's start in the list yielded, until
    deliver() is called on it or the block ends, whichever comes first: a hold can outlast
    the write it covers (flows/session.py keeps one until the steps begin). At the block's
    end the handlers are back, and what was held and not delivered is raised, unless the
    block ended in an error (the run ends with that one). Only the main thread catches
    signals: elsewhere nothing is held."""
    pending = Held()
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    try:
        for number in HELD:
            pending.hook(number)
        yield pending
    finally:
        pending.release()
    deliver(pending)


def deliver(pending: list[int]) -> None:
    """End the hold, then raise each held signal again, to the handler that is back
    (Prefect's raises TerminationSignal, SIGINT's KeyboardInterrupt)."""
    if isinstance(pending, Held):
        pending.release()
    while pending:
        signal.raise_signal(pending.pop(0))
