"""Which k-space lines to measure: Bayesian design by exact information gain (the line loop of
:mod:`adaptcs.design.candidates` fed from a fully sampled k-space); the fixed masks it is compared with are in
:mod:`adaptcs.mri.masks` (imported here too).

Every mask is a set of rows of the centred k-space (:mod:`adaptcs.bases.separable`) with the same number of lines,
centre block included. Seeds go through local Generators only.
"""

from __future__ import annotations

import numpy as np

from adaptcs.design.candidates import CandidateDesigner, DesignRun, largest_gain, replay_candidates  # noqa: F401
from adaptcs.models._line_model import LineModel
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


def design_lines(kspace: np.ndarray, model: LineModel, *, start: np.ndarray, budget: int,
                 checkpoints=(), progress=None, choose=None, operator: KSpaceLines | None = None) -> DesignRun:
    """Retrospective sequential design: the line loop (:class:`adaptcs.design.candidates.CandidateDesigner`) fed
    from a fully sampled k-space (:func:`adaptcs.design.candidates.replay_candidates`): from ``start``, measure the
    line of largest exact information gain under the current fit (or the one ``choose`` picks), refit warm, until
    ``budget`` lines.

    Parameters
    ----------
    kspace : ndarray of complex, shape (ny, nx)
        Fully sampled centred k-space, lines read from it as they are chosen.
    model : line model
        :class:`adaptcs.models.line_phase.PhaseLineGaussian` or :class:`adaptcs.models.line_spike_slab.LineSpikeSlab`,
        refitted in place.
    start : array-like of int
        The first lines (e.g. :func:`centre_lines`).
    budget : int
        Lines at the end, start included.
    checkpoints : iterable of int
        Line counts at which the fit is taken to EP's strict test and kept (the last count always is); a model
        whose warm refits keep their hyper-parameters (``relearn_when_read = True``) is refitted from scratch there.
    progress : callable, optional
        ``progress(n_lines, model)`` after every refit.
    choose : callable, optional
        ``choose(model, candidates) -> (index into candidates, score)`` under the model's current fit; default the
        largest gain by ``operator`` (:func:`adaptcs.mri.greedy.oracle_choice` is the oracle's).
    operator : :class:`adaptcs.operators.KSpaceLines`, optional
        What a line is: how it is read from ``kspace`` and scored; default the lines of the model's basis.

    Returns
    -------
    :class:`adaptcs.design.candidates.DesignRun`
        ``fits`` holds a snapshot of the model (its fitted attributes) at each checkpoint.
    """
    operator = KSpaceLines(model.basis, n_first=len(start)) if operator is None else operator
    designer = CandidateDesigner(model, operator, choose=choose)
    return replay_candidates(designer, kspace, start=start, budget=budget, checkpoints=checkpoints,
                             progress=progress)


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
