"""Which k-space lines to measure: Bayesian design by exact information gain, and the fixed masks it is compared with.

Every mask is a set of rows of the centred k-space (:mod:`adaptcs.mri.lines`) with the same number of lines,
centre block included. Seeds go through local Generators only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from adaptcs.mri.model import LineSpikeSlab
from adaptcs.operators.kspace import KSpaceLines


def centre_lines(ny: int, count: int) -> np.ndarray:
    """The ``count`` rows nearest the centre of a centred k-space (ky = 0 at ``ny // 2``), shape (count,)."""
    if not 0 < count <= ny:
        raise ValueError(f"count must lie in 1..{ny}; got {count}")
    return np.sort(np.argsort(np.abs(np.arange(ny) - ny // 2), kind="stable")[:count])


def low_to_high(ny: int, count: int) -> np.ndarray:
    """The low-pass mask: the ``count`` lowest frequencies (:func:`centre_lines`)."""
    return centre_lines(ny, count)


def equispaced(ny: int, count: int, centre: int) -> np.ndarray:
    """``centre`` centre lines plus equispaced lines over the rest (the fastMRI convention), ``count`` in all."""
    middle = centre_lines(ny, centre)
    rest = np.setdiff1d(np.arange(ny), middle)
    picks = rest[np.round(np.linspace(0, rest.shape[0] - 1, count - centre)).astype(np.intp)]
    return np.sort(np.concatenate([middle, np.unique(picks)]))


def variable_density(ny: int, count: int, centre: int, rng: np.random.Generator, power: float = 2.0) -> np.ndarray:
    """``centre`` centre lines plus ``count - centre`` others drawn without replacement with probability
    proportional to ``(1 - |ky| / (ny / 2))^power + 1e-3``: a polynomial variable density (Lustig et al. 2007);
    the small floor lets every line be drawn."""
    middle = centre_lines(ny, centre)
    rest = np.setdiff1d(np.arange(ny), middle)
    distance = np.abs(rest - ny // 2) / (ny / 2)
    prob = (1.0 - distance) ** power + 1e-3
    prob /= prob.sum()
    return np.sort(np.concatenate([middle, rng.choice(rest, count - centre, replace=False, p=prob)]))


def jittered_density(ny: int, count: int, centre: int, rng: np.random.Generator, power: float = 2.0) -> np.ndarray:
    """A Poisson-like variable-density mask: ``centre`` centre lines plus ``count - centre`` others placed by
    jittered (stratified) sampling of the density of :func:`variable_density`, so that no two lines crowd together
    and gaps grow smoothly with ``|ky|`` (the blue-noise spacing Poisson-disc masks aim at, in one dimension).

    Stratum i of the density's cumulative distribution over the non-centre rows gets one line at a uniform draw
    inside it; a draw that lands on a row taken already moves to the nearest free row.
    """
    middle = centre_lines(ny, centre)
    rest = np.setdiff1d(np.arange(ny), middle)
    k = count - centre
    if not 0 <= k <= rest.shape[0]:
        raise ValueError(f"need centre <= count <= {ny}; got centre {centre}, count {count}")
    prob = (1.0 - np.abs(rest - ny // 2) / (ny / 2)) ** power + 1e-3
    cdf = np.cumsum(prob) / prob.sum()
    targets = (np.arange(k) + rng.uniform(size=k)) / max(k, 1)
    free = np.ones(rest.shape[0], bool)
    picks = []
    for t in targets:
        i = int(min(np.searchsorted(cdf, t), rest.shape[0] - 1))
        if not free[i]:
            open_rows = np.flatnonzero(free)
            i = int(open_rows[np.argmin(np.abs(open_rows - i))])
        free[i] = False
        picks.append(rest[i])
    return np.sort(np.concatenate([middle, np.array(picks, dtype=np.intp)]))


#: The fixed masks by name (the workflow's strategy names), each ``mask(ny, count, centre, rng)``.
FIXED_MASKS = {
    "low_to_high": lambda ny, count, centre, rng: low_to_high(ny, count),
    "equispaced": lambda ny, count, centre, rng: equispaced(ny, count, centre),
    "variable_density": variable_density,
    "jittered_density": jittered_density,
}


def fixed_mask(kind: str, ny: int, count: int, centre: int, rng: np.random.Generator) -> np.ndarray:
    """The lines of fixed mask ``kind`` (:data:`FIXED_MASKS`), sorted, shape (count,); ``rng`` draws the random
    ones."""
    if kind not in FIXED_MASKS:
        raise ValueError(f"unknown mask {kind!r}; choose from {sorted(FIXED_MASKS)}")
    return np.sort(FIXED_MASKS[kind](ny, count, centre, rng))


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
    kind : {"low_to_high", "equispaced", "variable_density", "jittered_density"}
    count : int
        Lines in the mask, centre included.
    centre : int
        Centre lines (low_to_high is all centre).

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
        low = self.count if self.kind == "low_to_high" else self.centre
        mask = np.zeros((ny, 1), bool)
        mask[lines] = True
        return mask, low
