"""Greedy line orders that minimise a reconstruction's error: the oracle that knows the image (a bound no scan can
use) and the offline greedy mask learned on training slices and then fixed (the protocol of Seeger et al. 2010's
offline designs and of learning-based CS, Gözcü et al. 2018: what a user can deploy today).

Both score a candidate line by the error of the posterior mean after one Gaussian update of the current fit
(``errors_after_line`` of :class:`adaptcs.models.line_spike_slab.LineSpikeSlab` or
:class:`adaptcs.models.line_phase.PhaseLineGaussian`), then refit with the chosen line, as the design loop does.
The error is the l2 error of the complex image, not the magnitude error the tables report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from adaptcs.models.line_spike_slab import LineSpikeSlab
from adaptcs.mri.design import centre_lines


def oracle_choice(kspace: np.ndarray, image: np.ndarray, region: np.ndarray | None = None,
                  chunk: int = 16) -> Callable:
    """A ``choose`` for :func:`adaptcs.mri.design.design_lines` (the line loop,
    :class:`adaptcs.design.CandidateDesigner`): the candidate whose values (read from the full
    ``kspace``, (ny, nx)) leave the smallest error against the true complex ``image`` (ny, nx); its score is that
    squared error.

    Without ``region`` the error is the complex image's over the whole field of view (``errors_after_line``, no
    image formed); with ``region`` (boolean, (ny, nx)) it is the error of the *magnitude* inside it, what the
    tables report (``images_after_line``, ``chunk`` candidates at a time).
    """
    if region is not None:
        region = np.asarray(region, dtype=bool)
        if region.shape != np.shape(image):
            raise ValueError(f"region must have the image's shape {np.shape(image)}; got {region.shape}")
        target = np.abs(image)[region]

    def choose(model: LineSpikeSlab, candidates: np.ndarray) -> tuple[int, float]:
        if region is None:
            errors = model.errors_after_line(candidates, kspace[candidates], image)
        else:
            errors = np.concatenate([
                np.sum((np.abs(model.images_after_line(part, kspace[part]))[:, region] - target) ** 2, axis=1)
                for part in np.array_split(candidates, max(1, -(-candidates.shape[0] // chunk)))])
        best = int(np.argmin(errors))
        return best, float(errors[best])

    return choose


def offline_greedy(training: Sequence[tuple[np.ndarray, np.ndarray]], make_model: Callable[[], LineSpikeSlab], *,
                   start: int, budget: int, progress=None) -> np.ndarray:
    """The offline greedy order: on every training slice at once, add the line that leaves the smallest mean
    relative squared error (each slice weighted by its own energy), refit every slice with it, until ``budget``.

    Parameters
    ----------
    training : sequence of (kspace, image)
        Fully sampled centred k-space (ny, nx) and true complex image (ny, nx) of each training slice (never a
        slice the mask is then used on).
    make_model : callable
        A new line model with ``errors_after_line`` (one per training slice): :class:`LineSpikeSlab` or
        :class:`adaptcs.models.line_phase.PhaseLineGaussian`.
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
    energy = [float(np.sum(np.abs(image) ** 2)) for _, image in training]
    for model, (kspace, _) in zip(models, training, strict=True):
        model.fit(kspace[lines], lines)
    while len(lines) < budget:
        candidates = np.setdiff1d(np.arange(ny), lines)
        score = sum(model.errors_after_line(candidates, kspace[candidates], image) / e
                    for model, (kspace, image), e in zip(models, training, energy, strict=True))
        lines.append(int(candidates[int(np.argmin(score))]))
        for model, (kspace, _) in zip(models, training, strict=True):
            model.fit(kspace[lines], lines, warm=True)
        if progress is not None:
            progress(len(lines))
    return np.array(lines)
