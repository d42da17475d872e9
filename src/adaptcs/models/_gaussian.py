"""Gaussian posterior of a linear model under a diagonal Gaussian prior (site) term.

The model is ``y = X w + noise`` with ``noise ~ N(0, s2 I_n)`` and a diagonal Gaussian term on ``w`` with
variances ``prior_var`` (``l``, shape (d,)) and natural means ``shift`` (= site mean / site variance).
The posterior is ``N(m, V)`` with

    V = (X^T X / s2 + diag(1 / l))^{-1},      m = V (X^T y / s2 + shift).

Two exact forms are provided and chosen by shape (:func:`LinearGaussianModel.posterior`):

* Woodbury (n < d): ``K = s2 I_n + X L X^T = C C^T`` (one Cholesky of an n x n matrix) and
  ``A = C^{-1} X L`` (n x d); then ``V = L - A^T A``. Means, marginal variances, ``V v`` products and
  ``log|V|`` all come from ``A`` and ``C``: O(n^2 d) per refactorisation, O(n d) per product, and no
  d x d matrix is ever formed.
* Direct (n >= d): ``P = X^T X / s2 + diag(1 / l) = R R^T`` (one Cholesky of a d x d matrix).
* Selection (every row measures one coefficient, no coefficient twice: a subset of an orthonormal basis in
  coefficient space): ``V`` is diagonal, ``V_jj = l_j s2 / (s2 + g_j l_j)`` with ``g_j`` the squared gain of the row
  that measures coefficient j (0 if none); O(n + d) per refactorisation, no n x n or d x d matrix.

All inputs are assumed validated by the caller; the hot paths call BLAS/LAPACK without finiteness checks.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas, lapack
from sklearn.utils.validation import check_is_fitted

from adaptcs import _validation as val


class LinearGaussianModel:
    """The data part of the model: ``X``, ``y`` and the noise variance, with what can be precomputed.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        Measurement rows (float64, finite).
    y : ndarray, shape (n,)
        Measurements.
    noise_var : float
        Noise variance ``s2`` (> 0).
    form : {"auto", "woodbury", "direct", "selection"}
        Which exact form to use; "auto" takes Woodbury when n < d (the cheaper one); "selection" needs rows that
        select coefficients (:func:`selected_columns`).
    selection : tuple of ndarray, optional
        With ``form="selection"``: what :func:`selected_columns` returned for X, if the caller has it already (a
        problem refitted at many noise levels checks once).
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, noise_var: float, form: str = "auto", selection=None):
        self.X = np.ascontiguousarray(X, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)
        self.noise_var = float(noise_var)
        self.n, self.d = self.X.shape
        if form not in ("auto", "woodbury", "direct", "selection"):
            raise ValueError(f"form must be 'auto', 'woodbury', 'direct' or 'selection'; got {form!r}")
        if form == "selection" and selection is None:
            selection = selected_columns(self.X)
            if selection is None:
                raise ValueError("form='selection' needs rows that each measure one coefficient, no coefficient "
                                 "twice")
        self.selection = selection if form == "selection" else None
        if self.selection is not None:  # O(n), not O(n d)
            columns, gains = self.selection
            self.Xty = np.zeros(self.d)
            self.Xty[columns] = gains * self.y / self.noise_var
        else:
            self.Xty = self.X.T @ self.y / self.noise_var  # shape (d,)
        self.yty = float(self.y @ self.y)
        self.use_woodbury = self.n < self.d if form == "auto" else form == "woodbury"
        self._XtX = None if self.use_woodbury or self.selection is not None else \
            (self.X.T @ self.X) / self.noise_var

    def fitted(self, coef: np.ndarray) -> np.ndarray:
        """``X coef``, shape (n,); O(n) when the rows select coefficients."""
        if self.selection is not None:
            columns, gains = self.selection
            return gains * coef[columns]
        return self.X @ coef

    def signal_to_noise(self, prior_var: np.ndarray) -> float:
        """``max_i sum_j X_ij^2 prior_var_j / s2``: the prior signal-to-noise ratio of the most informative row.

        Dimensionless and unchanged by rescaling X or y. Posterior variances computed as differences (the
        Woodbury form) lose about ``eps * signal_to_noise`` of their relative accuracy.
        """
        with np.errstate(over="ignore"):
            if self.selection is not None:
                columns, gains = self.selection
                return float(np.max(gains * gains * prior_var[columns]) / self.noise_var)
            return float(np.max((self.X * self.X) @ prior_var) / self.noise_var)

    def posterior(self, prior_var: np.ndarray,
                  shift: np.ndarray) -> WoodburyPosterior | DirectPosterior | SelectionPosterior:
        """Posterior for the diagonal term with variances ``prior_var`` (d,) and natural means ``shift`` (d,)."""
        if self.selection is not None:
            return SelectionPosterior(self, prior_var, shift)
        if self.use_woodbury:
            return WoodburyPosterior(self, prior_var, shift)
        return DirectPosterior(self, prior_var, shift)

    def posterior_mean(self, prior_var: np.ndarray, shift: np.ndarray) -> np.ndarray:
        """The posterior mean alone, shape (d,): in the Woodbury form without the marginal variances, about half
        the cost of :meth:`posterior` (one ``n x n`` Gram product and Cholesky factor, no triangular solve of X);
        the other forms compute the posterior."""
        if self.selection is not None or not self.use_woodbury:
            return self.posterior(prior_var, shift).mean
        B = self.X * np.sqrt(prior_var)
        K = blas.dsyrk(1.0, B.T, trans=1, lower=1)
        K.flat[:: self.n + 1] += self.noise_var
        C, info = lapack.dpotrf(K, lower=1, clean=1, overwrite_a=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"s2 I + X L X^T is not positive definite (dpotrf info={info})")
        lv = prior_var * (self.Xty + shift)  # V eta = L eta - L X^T K^-1 X L eta
        z, _info = lapack.dpotrs(C, self.X @ lv, lower=1)
        return lv - prior_var * (self.X.T @ z)


SELECTION_ROUNDING = 1e-12  # entries below this fraction of a row's largest count as zero (a transform's rounding)


def selected_columns(X: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The coefficient each row measures and its gain, if every row measures exactly one coefficient and no
    coefficient is measured twice (entries below :data:`SELECTION_ROUNDING` of the row's largest count as zero);
    None otherwise. O(n d).

    Returns
    -------
    columns : ndarray of intp, shape (n,)
    gains : ndarray, shape (n,)
        ``X[i, columns[i]]``.
    """
    n = X.shape[0]
    if n == 0 or n > X.shape[1]:
        return None
    columns = np.argmax(np.abs(X), axis=1)
    gains = X[np.arange(n), columns]
    if np.any(gains == 0.0) or np.unique(columns).shape[0] != n:
        return None
    peak = np.abs(gains)
    if np.count_nonzero(np.abs(X) > SELECTION_ROUNDING * peak[:, None]) != n:
        return None
    return columns, gains


class SelectionPosterior:
    """``N(m, V)`` when the rows select coefficients (:func:`selected_columns`): V is diagonal. Same attributes and
    methods as :class:`WoodburyPosterior`, all O(n + d)."""

    def __init__(self, model: LinearGaussianModel, prior_var: np.ndarray, shift: np.ndarray):
        s2 = model.noise_var
        columns, gains = model.selection
        self.prior_var = prior_var
        gain2 = np.zeros(model.d)
        gain2[columns] = gains * gains
        denom = s2 + gain2 * prior_var
        self.var = prior_var * s2 / denom
        self.var_reduction = prior_var * prior_var * gain2 / denom  # computed directly, as in the Woodbury form
        self.eta = model.Xty + shift
        self.mean = self.var * self.eta
        self._gain2_rows, self._columns = gains * gains, columns
        self._log_det_marginal = float(np.sum(np.log(s2 + self._gain2_rows * prior_var[columns])))

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """``V v`` for v of shape (d,) or (d, k); O(d k)."""
        return v * self.var if v.ndim == 1 else v * self.var[:, None]

    def quad_rows(self, Z: np.ndarray) -> np.ndarray:
        """``z^T V z`` for each row z of Z (k, d); returns shape (k,)."""
        return (Z * Z) @ self.var

    def trace_data(self) -> float:
        """``tr(X V X^T) = sum_i g_i V_jj`` for the model's own rows; O(n)."""
        return float(np.sum(self._gain2_rows * self.var[self._columns]))

    def log_det_marginal(self) -> float:
        """``log|K|``, ``K = s2 I + X L X^T`` (diagonal here)."""
        return self._log_det_marginal

    def log_det(self) -> float:
        """``log|V| = sum_j log V_jj`` (-inf if some l is 0)."""
        with np.errstate(divide="ignore"):
            return float(np.sum(np.log(self.var)))


class WoodburyPosterior:
    """``N(m, V)`` in the Woodbury form; see the module docstring.

    Attributes
    ----------
    mean : ndarray, shape (d,)
        Posterior mean ``m``.
    var : ndarray, shape (d,)
        Marginal variances ``diag(V)``.
    var_reduction : ndarray, shape (d,)
        ``prior_var - diag(V)``, computed directly as ``sum_i A_ij^2`` so that it keeps its relative
        accuracy when the data barely move a coefficient (cavity computations divide by it).
    """

    def __init__(self, model: LinearGaussianModel, prior_var: np.ndarray, shift: np.ndarray):
        s2 = model.noise_var
        self.prior_var = prior_var
        sqrt_l = np.sqrt(prior_var)
        B = model.X * sqrt_l  # X L^{1/2}, shape (n, d)
        # K = B B^T + s2 I, lower triangle only (dsyrk on the Fortran view B^T of shape (d, n)).
        K = blas.dsyrk(1.0, B.T, trans=1, lower=1)
        K.flat[:: model.n + 1] += s2
        C, info = lapack.dpotrf(K, lower=1, clean=1, overwrite_a=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"s2 I + X L X^T is not positive definite (dpotrf info={info})")
        self.chol = C
        # A^T = L^{1/2} B^T C^{-T}: a right-sided triangular solve on the Fortran view, no copy of B.
        At = blas.dtrsm(1.0, C, B.T, side=1, lower=1, trans_a=1, overwrite_b=1)
        At *= sqrt_l[:, None]
        self.A = At.T  # C^{-1} X L, shape (n, d)
        self.var_reduction = np.einsum("ij,ij->j", self.A, self.A)
        self.var = prior_var - self.var_reduction
        self.eta = model.Xty + shift
        self.mean = self.matvec(self.eta)
        self._n, self._noise_var = model.n, s2

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """``V v`` for v of shape (d,) or (d, k); O(n d k)."""
        lv = v * self.prior_var if v.ndim == 1 else v * self.prior_var[:, None]
        return lv - self.A.T @ (self.A @ v)

    def quad_rows(self, Z: np.ndarray) -> np.ndarray:
        """``z^T V z`` for each row z of Z (k, d); returns shape (k,)."""
        AZ = self.A @ Z.T  # (n, k)
        return (Z * Z) @ self.prior_var - np.einsum("ik,ik->k", AZ, AZ)

    def trace_data(self) -> float:
        """``tr(X V X^T)`` for the model's own rows; O(n^3) from the Cholesky factor, not O(n^2 d).

        ``X V X^T = s2 (I - s2 K^{-1})``, so the trace is ``s2 n - s2^2 |C^{-1}|_F^2``.
        """
        Cinv, info = lapack.dtrtri(self.chol, lower=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"singular Cholesky factor (dtrtri info={info})")
        s2 = self._noise_var
        return float(s2 * self._n - s2 * s2 * np.sum(Cinv * Cinv))

    def log_det_marginal(self) -> float:
        """``log|K|``, ``K = s2 I + X L X^T`` (the covariance of y), from its Cholesky factor."""
        return float(2.0 * np.sum(np.log(np.diag(self.chol))))

    def log_det(self) -> float:
        """``log|V|`` by Sylvester's identity: ``sum log l - log|K| + n log s2`` (-inf if some l is 0)."""
        if np.any(self.prior_var == 0.0):
            return -np.inf
        return float(np.sum(np.log(self.prior_var)) - 2.0 * np.sum(np.log(np.diag(self.chol)))
                     + self._n * np.log(self._noise_var))


class DirectPosterior:
    """``N(m, V)`` from the Cholesky factor of the d x d precision; used when n >= d.

    Same attributes as :class:`WoodburyPosterior`; here ``var_reduction`` is a difference, so it loses
    relative accuracy when ``prior_var`` is tiny (prior probabilities below about 1e-12).
    """

    def __init__(self, model: LinearGaussianModel, prior_var: np.ndarray, shift: np.ndarray):
        P = model._XtX.copy(order="F")
        P.flat[:: model.d + 1] += 1.0 / prior_var
        R, info = lapack.dpotrf(P, lower=1, clean=1, overwrite_a=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"X^T X / s2 + L^-1 is not positive definite (dpotrf info={info})")
        self.chol = R
        Rinv, info = lapack.dtrtri(R, lower=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"singular Cholesky factor (dtrtri info={info})")
        self._Rinv = Rinv  # V = Rinv^T Rinv
        self.var = np.einsum("ij,ij->j", Rinv, Rinv)
        self.var_reduction = prior_var - self.var
        self.eta = model.Xty + shift
        self.mean = self.matvec(self.eta)
        self._X = model.X
        self._log_det = float(-2.0 * np.sum(np.log(np.diag(R))))
        self._log_det_marginal = float(model.n * np.log(model.noise_var) + np.sum(np.log(prior_var)) - self._log_det)

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """``V v`` for v of shape (d,) or (d, k)."""
        x, _info = lapack.dpotrs(self.chol, v, lower=1)
        return x

    def quad_rows(self, Z: np.ndarray) -> np.ndarray:
        """``z^T V z`` for each row z of Z (k, d); returns shape (k,)."""
        W = self._Rinv @ Z.T
        return np.einsum("ik,ik->k", W, W)

    def trace_data(self) -> float:
        """``tr(X V X^T)`` for the model's own rows; O(n d^2)."""
        return float(np.sum(np.maximum(self.quad_rows(self._X), 0.0)))

    def log_det_marginal(self) -> float:
        """``log|K| = n log s2 + sum log l + log|P|`` (Sylvester), ``K = s2 I + X L X^T``."""
        return self._log_det_marginal

    def log_det(self) -> float:
        """``log|V| = -log|P|``."""
        return self._log_det


class GaussianPosteriorMixin:
    """``cov_matvec`` and ``predict`` for estimators whose fit leaves ``coef_``, ``n_features_in_``, the
    posterior object ``_posterior`` (Woodbury or direct form, possibly of rescaled data), ``_cov_unit``
    (what its covariance is multiplied by to be in the units of the coefficients) and the noise variance
    ``_noise_var``."""

    def cov_matvec(self, v):
        """Posterior covariance times ``v``, without forming the covariance.

        Parameters
        ----------
        v : array-like, shape (d,) or (d, k)

        Returns
        -------
        ndarray, same shape as ``v``
            ``V v``; O(n d k) from the cached factor of the last fit.
        """
        check_is_fitted(self, "coef_")
        return self._posterior.matvec(val.check_vector_or_block(v, self.n_features_in_)) * self._cov_unit

    def predict(self, X, return_std: bool = False):
        """Predictive mean ``x^T m`` (and standard deviation ``sqrt(x^T V x + s2)``, noise included).

        Parameters
        ----------
        X : array-like, shape (k, d)
        return_std : bool

        Returns
        -------
        mean : ndarray, shape (k,)
        std : ndarray, shape (k,), only if ``return_std``
        """
        check_is_fitted(self, "coef_")
        X = val.check_predict_rows(self, X)
        mean = X @ self.coef_
        if not return_std:
            return mean
        quad = np.maximum(self._posterior.quad_rows(X), 0.0) * self._cov_unit
        return mean, np.sqrt(quad + self._noise_var)
