"""A cancellation held back across the ledger's first write (flows/signals.py): a SIGTERM
that comes during the block is kept, not raised, and raised to the handler that is back
once delivered; one that comes afterwards is raised at once."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from types import FrameType

import pytest

from flows import signals


class Cancelled(Exception):
    pass


def _cancel(number: int, frame: FrameType | None) -> None:
    raise Cancelled(number)


@pytest.fixture
def cancelling() -> Iterator[None]:
    """SIGTERM raises Cancelled, as Prefect's handler raises TerminationSignal."""
    previous = signal.signal(signal.SIGTERM, _cancel)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_sigterm_during_the_block_is_held_until_delivered(cancelling: None) -> None:
    with signals.held() as pending:
        os.kill(os.getpid(), signal.SIGTERM)
        written = True  # the write the signal met goes on to its end
    assert written and pending == [signal.SIGTERM]
    with pytest.raises(Cancelled):
        signals.deliver(pending)
    assert pending == []
    with pytest.raises(Cancelled):  # the handler is back
        os.kill(os.getpid(), signal.SIGTERM)


def test_nothing_held_delivers_nothing(cancelling: None) -> None:
    with signals.held() as pending:
        pass
    signals.deliver(pending)
