"""Greedy line orders that minimise a reconstruction's error: the oracle that knows the image (a bound no scan can
use) and the offline greedy mask learned on training slices and then fixed (the protocol of Seeger et al. 2010's
offline designs and of learning-based CS, Gözcü et al. 2018: what a user can deploy today).

Both score a candidate line by the error of the posterior mean after one Gaussian update of the current fit
(:meth:`adaptcs.mri.model.LineSpikeSlab.errors_after_line`), then refit with the chosen line, as the design loop
does. The error is the l2 error of the complex image (equal to the coefficients' error: the transforms are
unitary), not the magnitude error the tables report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from adaptcs.mri.design import centre_lines
from adaptcs.mri.model import LineSpikeSlab


def oracle_choice(kspace: np.ndarray, truth: np.ndarray) -> Callable:
    """A ``choose`` for :func:`adaptcs.mri.design.design_lines`: the candidate whose values (read from the full
    ``kspace``, (ny, nx)) leave the smallest error against the true coefficients ``truth`` (ny, nx); its score is
    that squared error."""

    def choose(model: LineSpikeSlab, candidates: np.ndarray) -> tuple[int, float]:
        errors = model.errors_after_line(candidates, kspace[candidates], truth)
        best = int(np.argmin(errors))
        return best, float(errors[best])

    return choose


def offline_greedy(training: Sequence[tuple[np.ndarray, np.ndarray]], make_model: Callable[[], LineSpikeSlab], *,
                   start: int, budget: int, progress=None) -> np.ndarray:
    """The offline greedy order: on every training slice at once, add the line that leaves the smallest mean
    relative squared error (each slice weighted by its own energy), refit every slice with it, until ``budget``.

    Parameters
    ----------
    training : sequence of (kspace, truth)
        Fully sampled centred k-space (ny, nx) and true wavelet coefficients (ny, nx) of each training slice (never
        a slice the mask is then used on).
    make_model : callable
        A new :class:`LineSpikeSlab` (one per training slice).
    start : int
        Centre lines every order starts with.
    budget : int
        Lines in the end.
    progress : callable, optional
        ``progress(n_lines)`` after each line.

    Returns
    -------
    ndarray of int, shape (budget,)
        The lines in the order chosen, centre lines first: its first ``m`` lines are the mask of ``m`` lines.
    """
    if not training:
        raise ValueError("offline greedy needs at least one training slice")
    ny = training[0][0].shape[0]
    lines = list(centre_lines(ny, start))
    if not start <= budget <= ny:
        raise ValueError(f"budget must lie in {start}..{ny}; got {budget}")
    models = [make_model() for _ in training]
    energy = [float(np.sum(np.abs(truth) ** 2)) for _, truth in training]
    for model, (kspace, _) in zip(models, training, strict=True):
        model.fit(kspace[lines], lines)
    while len(lines) < budget:
        candidates = np.setdiff1d(np.arange(ny), lines)
        score = sum(model.errors_after_line(candidates, kspace[candidates], truth) / e
                    for model, (kspace, truth), e in zip(models, training, energy, strict=True))
        lines.append(int(candidates[int(np.argmin(score))]))
        for model, (kspace, _) in zip(models, training, strict=True):
            model.fit(kspace[lines], lines, warm=True)
        if progress is not None:
            progress(len(lines))
    return np.array(lines)
