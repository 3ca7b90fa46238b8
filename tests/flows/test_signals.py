"""A cancellation held back (flows/signals.py): a SIGTERM that comes during the hold is
kept, not raised, and raised to the handler that is back once delivered or once the
block ends; one that comes afterwards is raised at once."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from types import FrameType

import pytest
from prefect.exceptions import TerminationSignal

from flows import signals
from flows.kube.client import _answered_first


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


def test_a_sigterm_during_the_block_is_held_until_its_end(cancelling: None) -> None:
    written = False
    with pytest.raises(Cancelled), signals.held() as pending:
        os.kill(os.getpid(), signal.SIGTERM)
        written = True  # the write the signal met goes on to its end
    assert written and pending == []
    with pytest.raises(Cancelled):  # the handler is back
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_hold_lasts_until_its_delivery_inside_the_block(cancelling: None) -> None:
    """flows/session.py holds from before the ledger's write until the steps begin."""
    with signals.held() as pending:
        written = True  # the write is answered: the steps have not begun
        os.kill(os.getpid(), signal.SIGTERM)
        assert written and pending == [signal.SIGTERM]
        with pytest.raises(Cancelled):
            signals.deliver(pending)  # the steps begin
        with pytest.raises(Cancelled):  # the handler is back, in the block too
            os.kill(os.getpid(), signal.SIGTERM)


def test_what_a_block_held_and_did_not_deliver_is_raised_at_its_end(cancelling: None) -> None:
    """A rerun of a finished handoff never reaches the steps' delivery: its cancellation
    is not lost."""
    with pytest.raises(Cancelled), signals.held():
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_block_that_failed_ends_with_its_own_error(cancelling: None) -> None:
    with pytest.raises(OSError), signals.held():
        os.kill(os.getpid(), signal.SIGTERM)
        raise OSError("the ledger's write failed")
    with pytest.raises(Cancelled):  # the handler is back
        os.kill(os.getpid(), signal.SIGTERM)


def test_nothing_held_delivers_nothing(cancelling: None) -> None:
    with signals.held() as pending:
        pass
    signals.deliver(pending)


class _Finalized:
    """Python prints and drops an exception raised while it runs a finalizer."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs, and raises, in here


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop
def test_a_cancellation_whose_raise_was_lost_is_raised_by_the_next_check(
    cancelling: None,
) -> None:
    with signals.noted():
        signals.check()  # nothing received: nothing raised
        _Finalized()  # dropped at once: its finalizer gets the signal, the raise is lost
        survived = True
        with pytest.raises(TerminationSignal):
            signals.check()
    assert survived
    signals.check()  # outside the block nothing is noted
    with pytest.raises(Cancelled):  # Prefect's (here: the fixture's) handler is back
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_noted_cancellation_is_raised_by_the_handler_in_place(cancelling: None) -> None:
    with signals.noted(), pytest.raises(Cancelled):
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_cancellation_during_a_fenced_write_is_raised_once_it_ends(cancelling: None) -> None:
    """flows/kube/client.py holds a cancellation across each fenced write: raised after the
    block, even when the write failed (the failure stays as its context)."""
    with pytest.raises(Cancelled) as raised, _answered_first():
        os.kill(os.getpid(), signal.SIGTERM)
        raise OSError("the write's own failure")
    assert isinstance(raised.value.__context__, OSError)


def test_a_fenced_write_inside_a_held_block_leaves_the_cancellation_to_that_block(
    cancelling: None,
) -> None:
    """The ledger's first write is held as a whole (flows/session.py): a cancellation met by
    a write inside it is kept for that block's delivery, not raised at the write's end."""
    with signals.held() as outer:
        with _answered_first():
            os.kill(os.getpid(), signal.SIGTERM)
        written = True
        assert written and outer == [signal.SIGTERM]
        with pytest.raises(Cancelled):
            signals.deliver(outer)
