"""SIGTERM held while saveable work runs (adaptcs._termination): recorded, delivered once the work has saved, to the
handler that was there before, and never lost when the work ends first."""

import os
import signal
import threading

import pytest

from adaptcs import _termination
from adaptcs._termination import TerminationHold, end_process, requested


@pytest.fixture
def caller_handler():
    """A handler of the caller's own that counts the SIGTERMs delivered to it (restored afterwards)."""
    calls = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    yield calls
    signal.signal(signal.SIGTERM, previous)
    assert _termination._state == {"depth": 0, "requested": False, "previous": None}


def _term():
    os.kill(os.getpid(), signal.SIGTERM)


def test_a_held_sigterm_is_recorded_then_delivered_by_end_process_and_the_hold_stays(caller_handler):
    mine = signal.getsignal(signal.SIGTERM)
    with TerminationHold() as hold:
        assert hold.holding and not requested()
        _term()
        assert requested() and caller_handler == []
        end_process()
        assert caller_handler == [signal.SIGTERM] and not requested()
        _term()  # the caller's handler returned: the next one is held again
        assert requested() and caller_handler == [signal.SIGTERM]
    assert caller_handler == [signal.SIGTERM] * 2  # held to the end of the work: delivered on leaving
    assert signal.getsignal(signal.SIGTERM) is mine


def test_nested_holds_share_one_record_and_only_the_outermost_delivers(caller_handler):
    with TerminationHold():
        with TerminationHold() as inner:
            _term()
        assert not inner.holding and requested() and caller_handler == []  # the outer work has not saved yet
        inner.release()  # once only
        assert requested()
    assert caller_handler == [signal.SIGTERM]


def test_an_inactive_hold_or_one_outside_the_main_thread_holds_nothing(caller_handler):
    with TerminationHold(active=False) as hold:
        assert not hold.holding
        _term()
        assert caller_handler == [signal.SIGTERM] and not requested()
    seen = []

    def other_thread():
        with TerminationHold() as hold:
            seen.append(hold.holding)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen == [False]


def test_a_hold_released_early_gives_the_signal_back(caller_handler):
    hold = TerminationHold().__enter__()
    hold.release()  # nothing to save to any more
    _term()
    assert caller_handler == [signal.SIGTERM] and not requested()
    hold.__exit__(None, None, None)
    assert caller_handler == [signal.SIGTERM]
