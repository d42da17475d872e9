"""Checkpoints of a running design loop, so that a long replicate killed part-way goes on from its last save.

:func:`adaptcs.design.run_sequential_design` with ``resume_file=<path>`` pickles, every ``save_seconds`` of wall
time at the end of a step, everything the rest of the loop depends on: the designer (its rows, values, tracked fit
and warm state), the per-step record so far, the random generator (the same object the designer draws from, so
their shared state survives) and the step reached. Run again with the same file, the loop unpickles it and goes on
from the next step, and the result is the one of a loop never stopped, bit for bit (tested). The file is written
atomically with a SHA-256 of its bytes (:func:`adaptcs._io.write_checked_npz`) and removed when the loop ends.

The caller names the file so that only the same loop reads it: the workflow puts it next to the replicate's kept
result (:mod:`adaptcs.experiments._replicate_store`), whose digest covers the job, the replicate's data and the
code of the whole package. A file that cannot be read is removed with a warning and the loop starts from its first
step. SIGTERM (a scheduler's time limit) is held until the step under way ends; the loop then saves, whatever the
interval, and the process ends. A chain inside the step (a Gibbs sampler's) that reaches its own save point first
saves itself and ends the process there; the loop's last save stands. Pickles run code when read: only files this
library wrote in the job's own results folder are read.
"""

from __future__ import annotations

import logging
import pickle
import time
import warnings
from pathlib import Path

import numpy as np

from adaptcs._io import read_checked_npz, read_or_discard, write_checked_npz
from adaptcs._termination import SavesOnTermination

log = logging.getLogger(__name__)

FORMAT = 1
KEYS = ("designer", "record", "rng", "ok", "step")


def _read(path) -> dict:
    saved = read_checked_npz(path)
    if int(saved["format"]) != FORMAT:
        raise ValueError(f"format {int(saved['format'])}, not {FORMAT}")
    state = pickle.loads(saved["pickle"].tobytes())
    if not isinstance(state, dict) or set(state) != set(KEYS):
        raise ValueError("it does not hold a design loop's state")
    return state


class LoopCheckpoint(SavesOnTermination):
    """The checkpoint file of one design loop (or nothing, when ``path`` is None).

    Parameters
    ----------
    path : path or None
        The file (its folder is created on the first save, by :func:`adaptcs._io.atomic_write`); None: never save
        or resume.
    every : float
        Seconds of wall time between saves (0: after every step).
    """

    def __init__(self, path, every: float):
        self.path = None if path is None else Path(path)
        self.every = float(every)
        self._last_save = time.perf_counter()

    def load(self) -> dict | None:
        """The saved state (``designer``, ``record``, ``rng``, ``ok`` and ``step``, the last step done), or None if
        there is no readable file (a damaged one is removed with a warning)."""
        if self.path is None:
            return None
        state = read_or_discard(self.path, _read, what="design loop checkpoint",
                                instead="the loop starts again from its first step", stacklevel=3)
        if state is None:
            return None
        log.info("%s: resuming the design loop after step %d (%d rows told)", self.path, state["step"],
                 state["designer"].n_told_)
        return state

    def save_if_due(self, **state) -> None:
        """Save ``state`` (the :data:`KEYS`) if ``every`` seconds have passed since the last save or the start, or if
        SIGTERM came during the step (then end the process by it, once saved). Saving is a convenience: a full or
        read-only disk only warns, and the loop goes on unsaved."""
        terminated = self._terminated()
        if self.path is None or not (terminated or time.perf_counter() - self._last_save >= self.every):
            return
        try:
            data = np.frombuffer(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
            write_checked_npz(self.path, {"format": np.int64(FORMAT), "pickle": data})
            self._last_save = time.perf_counter()
            if terminated:
                log.warning("%s: terminated (SIGTERM): the design loop is saved after step %d; run it again to go on",
                            self.path, state["step"])
        except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
            warnings.warn(f"{self.path}: cannot save the design loop's checkpoint ({type(exc).__name__}: {exc}); "
                          "going on without one", RuntimeWarning, stacklevel=3)
            self.path = None
        self._after_save(terminated)

    def remove(self) -> None:
        """Remove the file (the loop has ended)."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
