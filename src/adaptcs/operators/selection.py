"""Basis images as candidates: a single-pixel camera that shows the images of a sparsifying basis measures one
coefficient per image (:mod:`adaptcs.design.basis_scan` replays such scans)."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from adaptcs.operators.base import PatternOperator, noise_variance


class BasisSelection(PatternOperator):
    """The images of ``basis``: candidate j measures coefficient ``c_j`` (the model's rows are a selection).

    The approximation's images are measured first by every acquisition (``n_first``; nothing else is sensible
    before them). Information gains come from the posterior variances alone (``x^T V x`` of a selection row is
    ``V_jj``): O(1) per candidate, no covariance products.

    Parameters
    ----------
    basis : :class:`adaptcs.bases.images.Basis`
    """

    def __init__(self, basis):
        super().__init__(basis.d, basis.d, basis)
        self.n_first = int(np.count_nonzero(basis.scales() == 0))

    def coarse_to_fine(self) -> np.ndarray:
        """The basis's coefficient order (coarse scales first)."""
        return np.arange(self.n_candidates)

    def patterns(self, chosen) -> np.ndarray:
        """The basis images (analysis functions) of the chosen coefficients, shape (len(chosen), d)."""
        chosen = self.check_chosen(chosen, unique=False)
        unit = np.zeros((chosen.shape[0], self.n_coef))
        unit[np.arange(chosen.shape[0]), chosen] = 1.0
        return self.basis.row_patterns(unit)

    def record(self, signal) -> np.ndarray:
        """Every coefficient of the signal, ``basis.analyze(x)``, shape (d,)."""
        return self.basis.analyze(np.asarray(signal, dtype=float).ravel())

    def rows(self, chosen, *, as_sparse: bool = False):
        """Selection rows ``e_j`` (scipy.sparse with ``as_sparse``: a 256 x 256 scan's dense selection would not
        fit in memory)."""
        chosen = self.check_chosen(chosen, unique=False)
        n = chosen.shape[0]
        if as_sparse:
            return sparse.csr_array((np.ones(n), (np.arange(n), chosen)), shape=(n, self.n_coef))
        rows = np.zeros((n, self.n_coef))
        rows[np.arange(n), chosen] = 1.0
        return rows

    def gains(self, estimator, candidates=None) -> np.ndarray:
        """``1/2 log(1 + V_jj / s2)`` from the estimator's posterior variances ``coef_var_``.

        ``s2`` is one noise variance (``noise_var_``), also under a photon noise model
        (:class:`adaptcs.models.WaveletTreeSpikeSlab` with ``noise="photon"``), whose values have variance
        ``s2 w_j``: so basis images are ranked by posterior variance either way. Ranking by the exact gain
        ``1/2 log(1 + V_jj / (s2 w_j))`` sends the rows to dark, precisely measured patterns and was measured
        worse (docs/log/results.md)."""
        variance = getattr(estimator, "coef_var_", None)
        if variance is None:
            raise ValueError(f"gains of basis images need the posterior variances coef_var_; "
                             f"{type(estimator).__name__} has none")
        candidates = np.arange(self.n_candidates) if candidates is None else self.check_chosen(candidates,
                                                                                               unique=False)
        return 0.5 * np.log1p(np.asarray(variance, dtype=float)[candidates] / noise_variance(estimator))
