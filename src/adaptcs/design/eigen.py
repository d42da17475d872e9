"""Leading eigenvectors of the posterior covariance, given only as the operator v -> V v.

Holding the prior sites fixed, the expected drop in posterior entropy from a row x grows with x^T V x, so the
best unit-norm row is the leading eigenvector of the posterior covariance V (docs/model.md section 4). V is
only available as the operator v -> V v (``estimator.cov_matvec``), so eigenvectors come from the power
method, run on a small block with a Rayleigh-Ritz step (subspace iteration). The block converges at the rate
lambda_{p+1} / lambda_1 instead of lambda_2 / lambda_1, which resolves near-degenerate leading eigenvalues;
with ``oversample=0`` and one vector it is the plain power method.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.linalg import eigh, qr
from sklearn.exceptions import ConvergenceWarning

from adaptcs import _validation as val

# A run started from given vectors iterates at least this often, so that the random vector added to them grows
# along a direction they miss (by (lambda / theta)^3 against the others) before convergence is tested.
MIN_STARTED_ITERATIONS = 3
GROWTH_TOL = 1e-2


@dataclass
class EigenResult:
    """Leading eigenpairs of a symmetric positive semi-definite operator.

    Attributes
    ----------
    vectors : ndarray, shape (d, k)
        Orthonormal eigenvector estimates, by decreasing eigenvalue, each with its largest-magnitude entry
        positive (a sign convention that does not depend on the rounding of the machine).
    values : ndarray, shape (k,)
        Rayleigh quotients (eigenvalue estimates).
    n_iter : int
        Block iterations used (each is one operator product with a (d, p) block).
    converged : bool
    block : ndarray, shape (d, p)
        The leading ``p = k + oversample`` Ritz vectors of the final block, to start the next call from.
    """

    vectors: np.ndarray
    values: np.ndarray
    n_iter: int
    converged: bool
    block: np.ndarray | None = None


def top_eigenvectors(matvec: Callable[[np.ndarray], np.ndarray], d: int, k: int = 1, *,
                     rng: np.random.Generator | None = None, tol: float = 1e-6, rq_tol: float = 1e-8,
                     max_iter: int = 1000, oversample: int = 4, start: np.ndarray | None = None) -> EigenResult:
    """Top-``k`` eigenpairs of a symmetric PSD operator by block power (subspace) iteration.

    Parameters
    ----------
    matvec : callable
        ``V @ B`` for a block B of shape (d, p); must return shape (d, p).
    d : int
        Dimension.
    k : int
        Number of eigenpairs wanted.
    rng : numpy.random.Generator, optional
        Source of the random start (a fresh unseeded generator if omitted).
    tol : float
        Direction tolerance: stop when every wanted pair has ``||V u - theta u|| <= tol * theta_1``.
    rq_tol : float
        Or stop when the wanted Rayleigh quotients change by less than this, relatively, in one iteration
        (in a degenerate leading eigenspace the direction is arbitrary and only the value matters).
    max_iter : int
        Iteration cap; reaching it warns and sets ``converged = False``.
    oversample : int
        Extra block vectors beyond ``k`` (0 with k = 1 is the plain power method).
    start : ndarray, shape (d, m), optional
        Vectors to start from (e.g. the ``block`` of the previous call on a slightly changed operator): the
        first ``p = k + oversample`` of them and one random vector make the starting block, so that a direction
        they miss can still grow. A started run takes at least ``MIN_STARTED_ITERATIONS`` iterations, since the
        given vectors can be exact eigenvectors (zero residual) of the new operator while a direction they miss
        has become larger, and it does not stop while a Ritz value still grows by more than ``GROWTH_TOL`` of
        the largest per iteration. The random block is drawn whether or not
        ``start`` is given, so the random stream does not depend on it.
    """
    d = val.check_count(d, "d")
    k = val.check_count(k, "k")
    if k > d:
        raise ValueError(f"k ({k}) cannot exceed d ({d})")
    oversample = val.check_count(oversample, "oversample", minimum=0)
    max_iter = val.check_count(max_iter, "max_iter")
    rng = np.random.default_rng() if rng is None else rng
    p = min(d, k + oversample)

    block = rng.standard_normal((d, p))
    if start is not None:
        start = np.asarray(start, dtype=float)
        if start.ndim != 2 or start.shape[0] != d or not np.all(np.isfinite(start)):
            raise ValueError(f"start must be a finite array of shape ({d}, m); got shape {start.shape}")
        block = np.hstack([start[:, :p], block[:, :1]])
    Q, _ = qr(block, mode="economic")
    min_iter = 1 if start is None else min(MIN_STARTED_ITERATIONS, max_iter)
    previous = previous_all = None
    converged = False
    for n_iter in range(1, max_iter + 1):  # noqa: B007 (read after the loop)
        Z = np.asarray(matvec(Q)).reshape(Q.shape)
        H = Q.T @ Z
        theta, S = eigh(0.5 * (H + H.T))
        theta, S = theta[::-1], S[:, ::-1]  # decreasing
        U, W = Q @ S, Z @ S  # Ritz vectors and V times them
        scale = max(theta[0], np.finfo(float).tiny)
        residual = np.linalg.norm(W[:, :k] - U[:, :k] * theta[:k], axis=0) / scale
        wanted = theta[:k]
        # Ritz values only grow; one that still grows fast is a direction the block is still turning towards.
        growing = start is not None and previous_all is not None and \
            np.max(theta - previous_all) > GROWTH_TOL * scale
        if n_iter >= min_iter and not growing and (residual.max() <= tol or (
                previous is not None and np.max(np.abs(wanted - previous)) <= rq_tol * scale)):
            converged = True
            break
        previous, previous_all = wanted, theta
        Q, _ = qr(W, mode="economic")
    if not converged:
        warnings.warn(f"power method: no convergence in {max_iter} iterations (direction residual "
                      f"{residual.max():.2e} > {tol})", ConvergenceWarning, stacklevel=2)
    U = _signed(U)
    return EigenResult(vectors=U[:, :k], values=np.maximum(theta[:k], 0.0), n_iter=n_iter, converged=converged,
                       block=U[:, :p])


def _signed(U: np.ndarray) -> np.ndarray:
    """Columns with their largest-magnitude entry positive.

    An eigenvector's sign is arbitrary, and the one the Rayleigh-Ritz step returns can change with the rounding
    of the BLAS kernel; the sign of a measurement row decides how its noise enters, so without a convention the
    same design on another CPU measures different data.
    """
    signs = np.sign(U[np.argmax(np.abs(U), axis=0), np.arange(U.shape[1])])
    return U * np.where(signs == 0, 1.0, signs)


def leading_eigenvector(matvec: Callable[[np.ndarray], np.ndarray], d: int, *,
                        rng: np.random.Generator | None = None, tol: float = 1e-6,
                        max_iter: int = 1000, oversample: int = 4) -> tuple[np.ndarray, float]:
    """Leading eigenvector and eigenvalue of a symmetric PSD operator given only as v -> V v.

    Returns
    -------
    vector : ndarray, shape (d,)
        Unit vector.
    value : float
        Its Rayleigh quotient.

    See :func:`top_eigenvectors` for the parameters and the stopping rule.
    """
    res = top_eigenvectors(lambda B: matvec(B), d, 1, rng=rng, tol=tol, max_iter=max_iter, oversample=oversample)
    return res.vectors[:, 0], float(res.values[0])
