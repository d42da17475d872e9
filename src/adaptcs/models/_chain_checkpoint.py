"""Checkpoints of a long Gibbs chain, so that a job killed at its time limit goes on where it stopped.

A chain saves its whole state (the sweep it is at, the group variances, ``C^{-1}``, the random generator's state,
the samples kept so far and the CPU seconds the chain has taken) every ``every`` seconds of wall time into one
``.npz`` file. The file's name is a digest of everything the chain depends on: its inputs, its prior, its length,
its random generator's starting state and the sampler's code. A later fit with the same digest (the same job run
again) reads it and goes on from there, so a resumed chain gives the same samples bit for bit as one that was never
stopped. A fit of anything else never reads it. The file is written atomically (a kill leaves the old checkpoint or
the new one) and removed when the chain ends. SIGTERM, which a scheduler sends at a job's time limit some seconds
before it kills the job (SLURM's KillWait, 30 s by default), makes the chain save at the end of the block of sweeps
under way, so that the job loses (almost) nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import warnings
from pathlib import Path

import numpy as np

from adaptcs._io import data_digest, read_checked_npz, read_or_discard, write_checked_npz
from adaptcs._termination import SavesOnTermination

log = logging.getLogger(__name__)

FORMAT = 2  # 2: the CPU seconds spent before the save are kept
# The files whose code decides the chain: a change to either gives another digest (the old checkpoint is not read).
_CODE = ("gibbs.py", "_gibbs_kernel.py")


def _code_digest() -> str:
    sha = hashlib.sha256()
    for name in _CODE:
        sha.update((Path(__file__).with_name(name)).read_bytes())
    return sha.hexdigest()


def _rng_state(rng: np.random.Generator) -> str:
    return json.dumps(rng.bit_generator.state, sort_keys=True)


class ChainCheckpoint(SavesOnTermination):
    """The checkpoint file of one chain (or nothing, when ``folder`` is None).

    Parameters
    ----------
    folder : path or None
        Where the file lives (created on the first save); None: never save or resume.
    name : str
        The sampler's name, the start of the file's name.
    inputs : dict of str to array-like
        Everything the chain depends on besides the random generator (data, prior, lengths): their digest, with the
        generator's starting state and the sampler's code, names the file.
    rng : numpy Generator
        The chain's generator, before its first draw.
    every : float
        Seconds of wall time between saves (0: after every block of sweeps).
    """

    def __init__(self, folder, name: str, inputs: dict, rng: np.random.Generator, every: float):
        self.every = float(every)
        self.path = None
        if folder is not None:
            digest = data_digest({**{k: np.asarray(v) for k, v in inputs.items()},
                                  "_rng": np.asarray(_rng_state(rng)), "_code": np.asarray(_code_digest()),
                                  "_versions": np.asarray(f"{FORMAT} {np.__version__}")})
            self.path = Path(folder) / f"{name}-{digest[:24]}.npz"
        self._last_save = time.perf_counter()
        self._cpu_start, self._cpu_before = time.process_time(), 0.0  # this process's start; earlier ones' CPU

    def resume(self, shapes: dict, total: int, block: int) -> dict | None:
        """The saved state if there is a readable one of these shapes, else None (a damaged file is removed with a
        warning, and the chain starts again).

        Parameters
        ----------
        shapes : dict of str to tuple
            Shapes of ``lam``, ``Cinv``, ``w_out`` and ``lam_out`` (the full sample arrays).
        total, block : int
            The chain's sweeps, and the sweeps between two saves' positions (the saved sweep is a multiple of
            ``block`` and at most ``total``, or ``total``).

        Returns
        -------
        dict or None
            ``sweep`` (int, the next sweep), ``written`` (int, samples kept), ``lam``, ``Cinv``, ``w_kept``,
            ``lam_kept`` (the first ``written`` rows of the sample arrays), ``rng_state`` (dict) and
            ``cpu_seconds`` (float, the CPU time the chain took up to the save, in the processes that ran it).
        """
        if self.path is None:
            return None

        def read(path) -> dict:
            state = read_checked_npz(path)
            written, sweep = int(state["written"]), int(state["sweep"])
            expected = {"lam": shapes["lam"], "Cinv": shapes["Cinv"],
                        "w_kept": (written, shapes["w_out"][1]), "lam_kept": (written, shapes["lam_out"][1])}
            wrong = [k for k, shape in expected.items() if state[k].shape != tuple(shape)]
            if wrong or not 0 <= written <= shapes["w_out"][0] or not 0 <= sweep <= total \
                    or (sweep % block and sweep != total):
                raise ValueError(f"its arrays do not fit this chain ({', '.join(wrong) or 'counts'})")
            cpu_seconds = float(state["cpu_seconds"])
            if not np.isfinite(cpu_seconds) or cpu_seconds < 0:
                raise ValueError(f"its CPU time {cpu_seconds} is not a duration")
            return {"sweep": sweep, "written": written, "lam": state["lam"], "Cinv": state["Cinv"],
                    "w_kept": state["w_kept"], "lam_kept": state["lam_kept"],
                    "rng_state": json.loads(str(state["rng_state"])), "cpu_seconds": cpu_seconds}

        state = read_or_discard(self.path, read, what="checkpoint",
                                instead="the chain starts again from its first sweep", stacklevel=3)
        if state is None:
            return None
        log.info("%s: resuming the chain at sweep %d (%d samples kept, %.1f CPU s before)", self.path, state["sweep"],
                 state["written"], state["cpu_seconds"])
        self._cpu_before = state["cpu_seconds"]
        return state

    def cpu_seconds(self) -> float:
        """CPU seconds the chain has taken so far: in the processes before the one that resumed it, and in this one
        since the checkpoint was made (the process's CPU time, all its threads)."""
        return self._cpu_before + time.process_time() - self._cpu_start

    def save_if_due(self, sweep: int, written: int, lam, Cinv, w_out, lam_out, rng, *,
                    only_if_terminated: bool = False) -> None:
        """Save the state before ``sweep`` if ``every`` seconds have passed since the last save (or the start) and
        not ``only_if_terminated``, or if SIGTERM came during the last block (then end the process by it, once
        saved)."""
        terminated = self._terminated()
        due = time.perf_counter() - self._last_save >= self.every and not only_if_terminated
        if self.path is None or not (due or terminated):
            return
        state = {"sweep": np.int64(sweep), "written": np.int64(written), "lam": lam, "Cinv": Cinv,
                 "w_kept": w_out[:written], "lam_kept": lam_out[:written], "rng_state": np.asarray(_rng_state(rng)),
                 "cpu_seconds": np.float64(self.cpu_seconds())}
        try:
            write_checked_npz(self.path, state)
            self._last_save = time.perf_counter()
            if terminated:
                log.warning("%s: terminated (SIGTERM): the chain is saved at sweep %d; run the fit again to go on",
                            self.path, sweep)
        except OSError as exc:  # a full or read-only disk must not stop the chain: it goes on unsaved
            warnings.warn(f"{self.path}: cannot save the chain's checkpoint ({exc}); going on without one",
                          RuntimeWarning, stacklevel=3)
            self.path = None
        self._after_save(terminated)

    def remove(self) -> None:
        """Remove the file (the chain has ended)."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
