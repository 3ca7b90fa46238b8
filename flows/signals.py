"""A cancellation (SIGTERM, as a Prefect worker sends, or SIGINT) held back across the
ledger's first write, and delivered where the run rolls back: one that met the write
mid-request would otherwise leave the ledger written and the run gone, not rolled back.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

HELD = (signal.SIGTERM, signal.SIGINT)


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
