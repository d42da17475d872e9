"""SIGTERM held while work that can be saved is under way, so that a job stopped at its time limit saves first.

A scheduler ends a job at its time limit with SIGTERM, and SIGKILL some seconds later (SLURM's KillWait, 30 s by
default). Work that keeps a checkpoint (a Gibbs chain, a design loop) enters a :class:`TerminationHold`: while one
is active, SIGTERM only records that it came. The work looks at :func:`requested` where its state is whole (the end
of a block of sweeps, of a design step), saves, and calls :func:`end_process`, which delivers the signal to the
handler that was there before the first hold (by default the process ends by SIGTERM, as it would have at once).

Holds nest (a chain inside a design loop): they share one record, and whichever reaches a save point first after
the signal saves and ends the process. Only the main thread can set a handler; elsewhere a hold does nothing.
"""

from __future__ import annotations

import signal
import threading

_state = {"depth": 0, "requested": False, "previous": None}  # one record for the process


def _hold(signum, frame) -> None:
    _state["requested"] = True


def requested() -> bool:
    """Whether SIGTERM came while a hold was active (and has not been delivered yet)."""
    return bool(_state["requested"])


def end_process() -> None:
    """Deliver the held SIGTERM to the handler that was there before the first hold: by default the process ends by
    it. Where that handler is the caller's own and returns, the holds stay in place and hold the next one."""
    _state["requested"] = False
    if _state["previous"] is None:  # no hold is active here: nothing was held
        signal.raise_signal(signal.SIGTERM)
        return
    signal.signal(signal.SIGTERM, _state["previous"])
    try:
        signal.raise_signal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, _hold)


class TerminationHold:
    """Hold SIGTERM while inside (``with TerminationHold(): ...``), from the main thread; ``active=False`` holds
    nothing (work with nowhere to save to). A SIGTERM still held when the outermost hold ends (the work ended
    between two save points, or by an error) is delivered then.

    Parameters
    ----------
    active : bool
        Whether to hold at all.
    """

    def __init__(self, active: bool = True):
        self.active = bool(active)
        self._holding = False

    def __enter__(self) -> TerminationHold:
        if self.active and threading.current_thread() is threading.main_thread():
            if _state["depth"] == 0:
                previous = signal.signal(signal.SIGTERM, _hold)
                _state["previous"] = signal.SIG_DFL if previous is None else previous  # None: set outside Python
            _state["depth"] += 1
            self._holding = True
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    @property
    def holding(self) -> bool:
        """Whether this hold is in place (entered, active, in the main thread, not released)."""
        return self._holding

    def release(self) -> None:
        """Stop holding (once; also on leaving the ``with`` block): when no other hold is left, the handler from
        before the first one is back, and a SIGTERM held until now is delivered to it."""
        if not self._holding:
            return
        self._holding = False
        _state["depth"] -= 1
        if _state["depth"] == 0:
            previous, _state["previous"] = _state["previous"], None
            signal.signal(signal.SIGTERM, previous)
            if _state["requested"]:
                _state["requested"] = False
                signal.raise_signal(signal.SIGTERM)


class SavesOnTermination:
    """Base of a checkpoint file that saves on SIGTERM (a chain's, a design loop's): ``with checkpoint:`` holds
    SIGTERM while the work runs, where there is a file to save to (``self.path`` not None); the subclass's save
    point asks :meth:`_terminated`, saves, and calls :meth:`_after_save`."""

    path = None
    _hold = TerminationHold(active=False)  # replaced on entering

    def __enter__(self):
        self._hold = TerminationHold(active=self.path is not None).__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hold.release()  # a SIGTERM held while the work ended (an error, say) is delivered now

    def _terminated(self) -> bool:
        """Whether SIGTERM came while this work held it."""
        return self._hold.holding and requested()

    def _after_save(self, terminated: bool) -> None:
        """End the process by a held SIGTERM (once saved, or once saving failed); with no file left to save to (a
        failed save sets ``path`` to None) stop holding, so that SIGTERM ends the process at once again (if nothing
        else holds it)."""
        if terminated:
            end_process()
        if self.path is None:
            self._hold.release()
