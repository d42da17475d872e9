"""Fixed Cartesian line masks: the ones an MRI user runs (docs/mri.md, "Masks").

Every mask is a sorted set of rows of the centred k-space (:mod:`adaptcs.bases.separable`; ky = 0 at ``ny // 2``) with
exactly ``count`` lines, its centre block included, so that masks compared at one count cost the same scan time.
Random masks draw from a local Generator only. :data:`FIXED_MASKS` names them for the command line, the workflow
and :class:`adaptcs.mri.design.LineMaskFunc`; each is ``mask(ny, count, centre, rng)``.

Partial Fourier (the masks every scanner offers, reconstructed by homodyne or POCS, :mod:`adaptcs.mri.partial`):
``partial_fourier_5_8`` etc. are contiguous blocks of ``count`` lines around the centre of which the fraction f of
the block's extent lies on the positive side (``round((1 - f) count)`` lines below ky = 0); ``pf_variable_density``
and ``pf_equispaced`` keep the lines with ky >= -(f - 1/2) ny (f = 6/8: 3/4 of k-space) and sample that side as
the variable-density and equispaced masks do.

fastMRI's masks (Zbontar et al. 2018, ``RandomMaskFunc`` and ``EquispacedMaskFunc``) with their centre fractions
(0.08 at R = 4, 0.04 at R = 8; 0.32 / R in general): fastMRI draws each other line with a probability that gives
``ny / R`` lines in expectation; here exactly ``count`` lines are kept (the random one: uniform without replacement
outside the centre, fastMRI's distribution given its count; the equispaced one: every ``(ny - low) / (count - low)``
-th line from a random offset), so that every mask has the same budget.
"""

from __future__ import annotations

import numpy as np

from adaptcs.bases.separable import centre_lines

PF_SIDE_FACTOR = 0.75  # the partial-Fourier factor of pf_variable_density and pf_equispaced


def _check(ny: int, count: int, centre: int) -> None:
    if not 0 < centre <= count <= ny:
        raise ValueError(f"need 0 < centre <= count <= ny; got centre {centre}, count {count}, ny {ny}")


def low_to_high(ny: int, count: int) -> np.ndarray:
    """The low-pass mask: the ``count`` lowest frequencies (:func:`centre_lines`)."""
    return centre_lines(ny, count)


def partial_fourier(ny: int, count: int, factor: float) -> np.ndarray:
    """The asymmetric low-to-high mask: ``count`` contiguous lines, ``round((1 - factor) count)`` of them below
    ky = 0 and the rest from ky = 0 up; ``factor`` in [1/2, 1) (1/2: low-to-high)."""
    if not 0.5 <= factor < 1.0:
        raise ValueError(f"a partial-Fourier factor lies in [0.5, 1); got {factor}")
    if not 0 < count <= ny:
        raise ValueError(f"count must lie in 1..{ny}; got {count}")
    below = int(round((1.0 - factor) * count))
    first = max(ny // 2 - below, 0)
    first = min(first, ny - count)
    return np.arange(first, first + count)


def _density(rows: np.ndarray, ny: int, power: float) -> np.ndarray:
    """The polynomial variable density ``(1 - |ky| / (ny / 2))^power + 1e-3`` of ``rows``, normalised."""
    prob = (1.0 - np.abs(rows - ny // 2) / (ny / 2)) ** power + 1e-3
    return prob / prob.sum()


def _spread(rest: np.ndarray, k: int) -> np.ndarray:
    """``k`` of the sorted rows ``rest``, as evenly spaced as their indices allow."""
    if k == 0:
        return np.zeros(0, np.intp)
    return rest[np.unique(np.round(np.linspace(0, rest.shape[0] - 1, k)).astype(np.intp))]


def equispaced(ny: int, count: int, centre: int) -> np.ndarray:
    """``centre`` centre lines plus equispaced lines over the rest, ``count`` in all."""
    _check(ny, count, centre)
    middle = centre_lines(ny, centre)
    rest = np.setdiff1d(np.arange(ny), middle)
    return np.sort(np.concatenate([middle, _spread(rest, count - centre)]))


def variable_density(ny: int, count: int, centre: int, rng: np.random.Generator, power: float = 2.0) -> np.ndarray:
    """``centre`` centre lines plus ``count - centre`` others drawn without replacement with probability
    proportional to ``(1 - |ky| / (ny / 2))^power + 1e-3``: a polynomial variable density (Lustig et al. 2007);
    the small floor lets every line be drawn."""
    _check(ny, count, centre)
    middle = centre_lines(ny, centre)
    rest = np.setdiff1d(np.arange(ny), middle)
    picks = rng.choice(rest, count - centre, replace=False, p=_density(rest, ny, power))
    return np.sort(np.concatenate([middle, picks]))


def _jittered(rest: np.ndarray, k: int, prob: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``k`` of ``rest`` by jittered sampling of ``prob`` (one draw per stratum of its cumulative distribution, a
    draw on a row taken already moved to the nearest free row)."""
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
    return np.array(picks, dtype=np.intp)


def jittered_density(ny: int, count: int, centre: int, rng: np.random.Generator, power: float = 2.0) -> np.ndarray:
    """A Poisson-like variable-density mask: ``centre`` centre lines plus ``count - centre`` others placed by
    jittered (stratified) sampling of the density of :func:`variable_density`, so that no two lines crowd together
    and gaps grow smoothly with ``|ky|`` (the blue-noise spacing Poisson-disc masks aim at, in one dimension)."""
    _check(ny, count, centre)
    middle = centre_lines(ny, centre)
    rest = np.setdiff1d(np.arange(ny), middle)
    picks = _jittered(rest, count - centre, _density(rest, ny, power), rng)
    return np.sort(np.concatenate([middle, picks]))


def _partial_side(ny: int, middle: np.ndarray, factor: float) -> np.ndarray:
    """The rows a partial-Fourier acquisition of ``factor`` can reach, ky >= -(factor - 1/2) ny, less ``middle``."""
    lowest = ny // 2 - int(round((factor - 0.5) * ny))
    rows = np.arange(max(lowest, 0), ny)
    return np.setdiff1d(rows, middle)


def pf_variable_density(ny: int, count: int, centre: int, rng: np.random.Generator,
                        factor: float = PF_SIDE_FACTOR) -> np.ndarray:
    """Partial Fourier plus variable density: ``centre`` centre lines plus ``count - centre`` rows of the sampled
    side (:func:`_partial_side`) drawn by the density of :func:`variable_density`."""
    _check(ny, count, centre)
    middle = centre_lines(ny, centre)
    side = _partial_side(ny, middle, factor)
    if count - centre > side.shape[0]:
        raise ValueError(f"{count} lines do not fit the {side.shape[0] + centre} rows of a partial-Fourier side")
    picks = rng.choice(side, count - centre, replace=False, p=_density(side, ny, 2.0))
    return np.sort(np.concatenate([middle, picks]))


def pf_equispaced(ny: int, count: int, centre: int, factor: float = PF_SIDE_FACTOR) -> np.ndarray:
    """Partial Fourier plus equispaced lines: ``centre`` centre lines plus ``count - centre`` rows of the sampled
    side (:func:`_partial_side`), evenly spaced."""
    _check(ny, count, centre)
    middle = centre_lines(ny, centre)
    side = _partial_side(ny, middle, factor)
    if count - centre > side.shape[0]:
        raise ValueError(f"{count} lines do not fit the {side.shape[0] + centre} rows of a partial-Fourier side")
    return np.sort(np.concatenate([middle, _spread(side, count - centre)]))


def fastmri_centre(ny: int, count: int) -> int:
    """fastMRI's centre lines at this acceleration: ``round(ny * 0.32 / R)`` with R = ny / count (0.08 of the lines
    at R = 4, 0.04 at R = 8), at least 1 and at most ``count``."""
    return int(min(max(round(ny * 0.32 * count / ny), 1), count))


def fastmri_random(ny: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """fastMRI's random mask at exactly ``count`` lines: its centre lines (:func:`fastmri_centre`) plus others drawn
    uniformly without replacement."""
    low = fastmri_centre(ny, count)
    middle = centre_lines(ny, low)
    rest = np.setdiff1d(np.arange(ny), middle)
    return np.sort(np.concatenate([middle, rng.choice(rest, count - low, replace=False)]))


def fastmri_equispaced(ny: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """fastMRI's equispaced mask at exactly ``count`` lines: its centre lines plus every ``step``-th other line
    (``step = (ny - low) / (count - low)``, rounded per line) from a random offset in ``[0, step)``."""
    low = fastmri_centre(ny, count)
    middle = centre_lines(ny, low)
    rest = np.setdiff1d(np.arange(ny), middle)
    k = count - low
    if k == 0:
        return middle
    step = rest.shape[0] / k
    picks = rest[np.minimum(np.floor(rng.uniform(0.0, step) + step * np.arange(k)).astype(np.intp),
                            rest.shape[0] - 1)]
    return np.sort(np.concatenate([middle, np.unique(picks)]))


#: The fixed masks by name (the workflow's strategy names), each ``mask(ny, count, centre, rng)``; ``centre`` is
#: the centre block of the masks that take one (the partial-Fourier blocks and fastMRI's masks have their own).
FIXED_MASKS = {
    "low_to_high": lambda ny, count, centre, rng: low_to_high(ny, count),
    "partial_fourier_5_8": lambda ny, count, centre, rng: partial_fourier(ny, count, 5 / 8),
    "partial_fourier_6_8": lambda ny, count, centre, rng: partial_fourier(ny, count, 6 / 8),
    "partial_fourier_7_8": lambda ny, count, centre, rng: partial_fourier(ny, count, 7 / 8),
    "pf_variable_density": pf_variable_density,
    "pf_equispaced": lambda ny, count, centre, rng: pf_equispaced(ny, count, centre),
    "equispaced": lambda ny, count, centre, rng: equispaced(ny, count, centre),
    "variable_density": variable_density,
    "jittered_density": jittered_density,
    "fastmri_random": lambda ny, count, centre, rng: fastmri_random(ny, count, rng),
    "fastmri_equispaced": lambda ny, count, centre, rng: fastmri_equispaced(ny, count, rng),
}

#: The masks that leave out part of one side of k-space (reconstructed by homodyne / POCS as well).
PARTIAL_FOURIER_MASKS = ("partial_fourier_5_8", "partial_fourier_6_8", "partial_fourier_7_8", "pf_variable_density",
                         "pf_equispaced")


def fixed_mask(kind: str, ny: int, count: int, centre: int, rng: np.random.Generator) -> np.ndarray:
    """The lines of fixed mask ``kind`` (:data:`FIXED_MASKS`), sorted, exactly ``count`` of them; ``rng`` draws the
    random ones."""
    if kind not in FIXED_MASKS:
        raise ValueError(f"unknown mask {kind!r}; choose from {sorted(FIXED_MASKS)}")
    lines = np.sort(FIXED_MASKS[kind](ny, count, centre, rng))
    if lines.shape[0] != count or np.unique(lines).shape[0] != count:  # a defect of a mask, never of the input
        raise AssertionError(f"mask {kind!r} gave {np.unique(lines).shape[0]} distinct lines, not {count}")
    return lines
