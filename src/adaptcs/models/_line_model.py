"""What every model of Cartesian k-space lines shares: the attributes a fit leaves, and a snapshot of them.

A line model is fitted on measured lines, ``model.fit(kspace_lines, lines, warm=False)``, and returns itself (the
estimator contract of docs/architecture.md, with a k-space line's readout in place of a row's value). What the fit
found is in its fitted attributes (:class:`LineModel`); a design loop that keeps the fit read at each checkpoint keeps
a :meth:`LineModel.snapshot` of it (the fitted attributes without the posterior, so that checkpoints cost an image
each, not a posterior each).
"""

from __future__ import annotations

import copy
import time

import numpy as np
from sklearn.base import BaseEstimator


def check_averages(averages, m: int) -> np.ndarray:
    """How many readouts each of ``m`` lines' values average, as floats of shape (m,) (None: 1 each); ValueError
    unless every one is a whole number >= 1. A line's values that average k readouts have the noise variance
    ``noise_var / k``: a model weighs its rows (and values) by ``sqrt(k)``, which whitens them."""
    if averages is None:
        return np.ones(m)
    averages = np.asarray(averages)
    if averages.shape != (m,) or not np.issubdtype(averages.dtype, np.number) or \
            np.any(~np.isfinite(averages)) or np.any(averages < 1) or np.any(averages != np.round(averages)):
        raise ValueError(f"averages must hold one whole number >= 1 per line ({m}); got {averages!r}")
    return averages.astype(float)


class LineModel(BaseEstimator):
    """A model of Cartesian k-space lines (abstract: :class:`adaptcs.models.line_phase.PhaseLineGaussian`,
    :class:`adaptcs.models.line_spike_slab.LineSpikeSlab`).

    Subclasses implement ``fit(kspace_lines, lines, *, warm=False)`` (returning ``self``), ``line_gains`` and
    ``errors_after_line``, and name in ``_posterior_attributes`` the private attributes that hold the posterior.

    Attributes
    ----------
    coef_ : ndarray of complex, shape (ny, nx)
        Posterior mean of the model's coefficients (the model says which: separable wavelet coefficients, or the
        y-wavelet coefficients of the phase-corrected image column by column).
    image_ : ndarray of complex, shape (ny, nx)
        Posterior mean image, in the units of the k-space data.
    p0_ : ndarray, shape (K,)
        Spike probability of each prior class (ones for a model without a spike).
    v0_ : ndarray, shape (K,)
        Slab variance of each prior class.
    converged_ : bool
        The fit at its fixed point (an exact Gaussian always is).
    fixed_point_residual_ : float
        How far one more undamped update would move the fit (0 for an exact fit).
    log_evidence_ : float
        (Approximate) log p(data) of the real-form data in the units given.
    n_iter_ : int
        Iterations of the fit (0 for an exact fit).
    cpu_seconds_ : float
        CPU time of the fit (``time.process_time``).
    not_converged_reasons_ : list of str
        Why the fit is not converged (empty when it is).
    columns_not_converged_ : int
        Columns of coefficients (independent blocks of the posterior) still moving when the fit stopped.
    """

    #: Fitted on the candidates (lines) and their values, not on rows (:class:`adaptcs.design.CandidateDesigner`).
    fits_candidates = True
    #: Private attributes that hold the posterior (cleared in a :meth:`snapshot`).
    _posterior_attributes: tuple = ()

    def _set_fitted(self, *, coef, image, p0, v0, converged: bool, residual: float, log_evidence: float,
                    n_iter: int, started: float, reasons=(), columns_not_converged: int = 0) -> None:
        """Set every fitted attribute of the class docstring (``started``: ``time.process_time()`` at the fit's
        start)."""
        self.coef_, self.image_ = coef, image
        self.p0_, self.v0_ = np.asarray(p0, dtype=float), np.asarray(v0, dtype=float)
        self.converged_, self.fixed_point_residual_ = bool(converged), float(residual)
        self.log_evidence_, self.n_iter_ = float(log_evidence), int(n_iter)
        self.not_converged_reasons_ = list(reasons)
        self.columns_not_converged_ = int(columns_not_converged)
        self.cpu_seconds_ = time.process_time() - started

    def snapshot(self) -> LineModel:
        """The fit as it is now, to read later: a copy with every fitted attribute (arrays shared, never changed in
        place by a later fit) and no posterior, so it cannot be refitted warm nor asked for gains."""
        self._check_posterior("take a snapshot")
        frozen = copy.copy(self)
        for name in self._posterior_attributes:
            setattr(frozen, name, None)
        frozen._is_snapshot = True
        return frozen

    def _check_posterior(self, doing: str) -> None:
        """RuntimeError unless the model holds a fitted posterior (``doing``: what needed it, for the message)."""
        if getattr(self, "_is_snapshot", False):
            raise RuntimeError(f"cannot {doing}: this is a snapshot of a fit (its fitted attributes only, no "
                               "posterior); ask the model it was taken from")
        if not hasattr(self, "coef_"):
            raise RuntimeError(f"fit the model before you {doing}")
