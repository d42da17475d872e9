"""Which k-space lines to measure: Bayesian design by exact information gain; the fixed masks it is compared with
are in :mod:`adaptcs.mri.masks` (imported here too).

Every mask is a set of rows of the centred k-space (:mod:`adaptcs.bases.separable`) with the same number of lines,
centre block included. Seeds go through local Generators only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from adaptcs.models.line_spike_slab import LineSpikeSlab
from adaptcs.mri.masks import (  # noqa: F401 (the fixed masks' home is adaptcs.mri.masks; named here as before)
    FIXED_MASKS,
    PARTIAL_FOURIER_MASKS,
    centre_lines,
    equispaced,
    fastmri_centre,
    fastmri_equispaced,
    fastmri_random,
    fixed_mask,
    jittered_density,
    low_to_high,
    partial_fourier,
    pf_equispaced,
    pf_variable_density,
    variable_density,
)
from adaptcs.operators.kspace import KSpaceLines


@dataclass
class DesignRun:
    """A design loop's outcome: the lines in the order measured and the fit after each checkpoint.

    Attributes
    ----------
    lines : ndarray of int, shape (m,)
        Rows of the centred k-space, the starting ones first, then in the order chosen.
    fits : dict of int -> LineFit
        The fit read at each checkpoint (number of lines), taken to the strict test.
    refits_stopped, refits : int
        Warm refits that only chose the next lines and stopped short of EP's fixed point, of all such refits.
    gains : list of float
        The score of each chosen line when it was chosen (the information gain in nats for Bayesian design).
    """

    lines: np.ndarray
    fits: dict = field(default_factory=dict)
    refits_stopped: int = 0
    refits: int = 0
    gains: list = field(default_factory=list)


def largest_gain(model: LineSpikeSlab, candidates: np.ndarray,
                 operator: KSpaceLines | None = None) -> tuple[int, float]:
    """Bayesian design's choice: the candidate of largest exact information gain (its index and gain in nats), as
    ``operator`` scores it under the model's fit (default: :class:`adaptcs.operators.KSpaceLines` of the model's
    basis)."""
    operator = KSpaceLines(model.basis) if operator is None else operator
    gains = operator.gains(model, candidates)
    best = int(np.argmax(gains))
    return best, float(gains[best])


def design_lines(kspace: np.ndarray, model: LineSpikeSlab, *, start: np.ndarray, budget: int,
                 checkpoints=(), progress=None, choose=None, operator: KSpaceLines | None = None) -> DesignRun:
    """Retrospective sequential design: from ``start``, measure (read from ``kspace``) the line of largest exact
    information gain under the current fit (or the one ``choose`` picks), refit warm, until ``budget`` lines.

    Parameters
    ----------
    kspace : ndarray of complex, shape (ny, nx)
        Fully sampled centred k-space, lines read from it as they are chosen.
    model : LineSpikeSlab
    start : array-like of int
        The first lines (e.g. :func:`centre_lines`).
    budget : int
        Lines at the end, start included.
    checkpoints : iterable of int
        Line counts at which the fit is taken to EP's strict test and kept (the last count always is); a model
        whose warm refits keep their hyper-parameters (``relearn_when_read = True``) is refitted from scratch there.
    progress : callable, optional
        ``progress(n_lines, fit)`` after every refit.
    choose : callable, optional
        ``choose(model, candidates) -> (index into candidates, score)`` under the model's current fit; default
        :func:`largest_gain` by ``operator`` (e.g. :func:`adaptcs.mri.greedy.oracle_choice` for the oracle).
    operator : :class:`adaptcs.operators.KSpaceLines`, optional
        What a line is: how it is read from ``kspace`` and scored; default the lines of the model's basis.
    """
    operator = KSpaceLines(model.basis, n_first=len(start)) if operator is None else operator
    if choose is None:
        def choose(model, candidates):
            return largest_gain(model, candidates, operator)
    lines = list(np.asarray(start, dtype=np.intp))
    ny = operator.n_candidates
    if not len(lines) <= budget <= ny:
        raise ValueError(f"budget must lie in {len(lines)}..{ny}; got {budget}")
    keep = set(int(c) for c in checkpoints if len(lines) <= c <= budget) | {budget}
    out = DesignRun(lines=np.array(lines))
    fit, cold = model.fit(operator.read(kspace, lines), lines), True
    relearn = getattr(model, "relearn_when_read", False)
    while True:
        if len(lines) in keep:
            if not fit.converged or (relearn and not cold):
                fit = model.fit(operator.read(kspace, lines), lines)  # a fit that is read: from scratch, strict
            out.fits[len(lines)] = fit
        if len(lines) == budget:
            break
        candidates = np.setdiff1d(np.arange(ny), lines)
        best, score = choose(model, candidates)
        lines.append(int(candidates[best]))
        out.gains.append(score)
        fit, cold = model.fit(operator.read(kspace, lines), lines, warm=True), False
        out.refits += 1
        out.refits_stopped += int(not fit.converged)
        if progress is not None:
            progress(len(lines), fit)
    out.lines = np.array(lines)
    return out


class LineMaskFunc:
    """A fixed line mask as a callable in the manner of fastMRI's ``MaskFunc``: ``mask_func(shape, seed=None)``.

    Parameters
    ----------
    kind : str
        One of :data:`adaptcs.mri.masks.FIXED_MASKS` (partial Fourier, fastMRI's masks, variable density, ...).
    count : int
        Lines in the mask, centre included (every kind has exactly this many).
    centre : int
        Centre lines of the kinds that take a centre block (low_to_high is all centre; the partial-Fourier blocks
        and fastMRI's masks set their own, reported as the low-frequency count).

    Calling it with a k-space ``shape`` ``(..., ny, nx)`` (phase encodes along axis -2, this package's convention;
    fastMRI puts them along the last axis, so transpose for its files) returns a boolean mask of shape ``(ny, 1)``
    that broadcasts against the k-space, and the number of low-frequency lines, as fastMRI's masks do. ``seed``
    seeds a local Generator (the random masks); the same seed gives the same mask.
    """

    KINDS = tuple(FIXED_MASKS)

    def __init__(self, kind: str, count: int, centre: int):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}; got {kind!r}")
        if not 0 < centre <= count:
            raise ValueError(f"need 0 < centre <= count; got centre {centre}, count {count}")
        self.kind, self.count, self.centre = kind, int(count), int(centre)

    def __call__(self, shape, seed: int | None = None) -> tuple[np.ndarray, int]:
        ny = int(shape[-2])
        if self.count > ny:
            raise ValueError(f"a mask of {self.count} lines does not fit {ny} phase encodes")
        lines = fixed_mask(self.kind, ny, self.count, self.centre, np.random.default_rng(seed))
        low = low_frequency_lines(self.kind, ny, self.count, self.centre)
        mask = np.zeros((ny, 1), bool)
        mask[lines] = True
        return mask, low


def low_frequency_lines(kind: str, ny: int, count: int, centre: int) -> int:
    """The contiguous low-frequency lines of mask ``kind`` (what fastMRI's masks return beside the mask): all of
    them for the contiguous blocks, fastMRI's centre for its masks, ``centre`` otherwise."""
    if kind == "low_to_high" or kind.startswith("partial_fourier"):
        return count
    if kind.startswith("fastmri"):
        return fastmri_centre(ny, count)
    return centre
