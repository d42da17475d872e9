"""Sequential experimental design: choose each new measurement row where the posterior is most uncertain.

Holding the prior sites fixed, the expected drop in posterior entropy from a row x grows with x^T V x, so the
best unit-norm row is the leading eigenvector of the posterior covariance V (ALGORITHMS.md section 2). V is
only available as the operator v -> V v (``estimator.cov_matvec``), so eigenvectors come from the power
method, run on a small block with a Rayleigh-Ritz step (subspace iteration). The block converges at the rate
lambda_{p+1} / lambda_1 instead of lambda_2 / lambda_1, which resolves near-degenerate leading eigenvalues;
with ``oversample=0`` and one vector it is the plain power method.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import eigh, qr
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from adaptcs.data.synthetic import sphere_rows
from adaptcs.metrics import relative_error
from adaptcs.models import _validation as val

STRATEGIES = ("design", "random", "pool")
# Hyper-parameters an estimator may report after fitting (attribute name + "_"), given or learned: the prior
# probability of a group, the slab variance, the noise variance, the (group) lasso penalty.
FITTED_HYPERPARAMETERS = ("p0", "v0", "noise_var", "alpha")


@dataclass
class EigenResult:
    """Leading eigenpairs of a symmetric positive semi-definite operator.

    Attributes
    ----------
    vectors : ndarray, shape (d, k)
        Orthonormal eigenvector estimates, by decreasing eigenvalue.
    values : ndarray, shape (k,)
        Rayleigh quotients (eigenvalue estimates).
    n_iter : int
        Block iterations used (each is one operator product with a (d, p) block).
    converged : bool
    """

    vectors: np.ndarray
    values: np.ndarray
    n_iter: int
    converged: bool


def top_eigenvectors(matvec: Callable[[np.ndarray], np.ndarray], d: int, k: int = 1, *,
                     rng: np.random.Generator | None = None, tol: float = 1e-6, rq_tol: float = 1e-8,
                     max_iter: int = 1000, oversample: int = 4) -> EigenResult:
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
    """
    d = val.check_count(d, "d")
    k = val.check_count(k, "k")
    if k > d:
        raise ValueError(f"k ({k}) cannot exceed d ({d})")
    oversample = val.check_count(oversample, "oversample", minimum=0)
    max_iter = val.check_count(max_iter, "max_iter")
    rng = np.random.default_rng() if rng is None else rng
    p = min(d, k + oversample)

    Q, _ = qr(rng.standard_normal((d, p)), mode="economic")
    previous = None
    converged = False
    for n_iter in range(1, max_iter + 1):  # noqa: B007 (read after the loop)
        Z = np.asarray(matvec(Q)).reshape(d, p)
        H = Q.T @ Z
        theta, S = eigh(0.5 * (H + H.T))
        theta, S = theta[::-1], S[:, ::-1]  # decreasing
        U, W = Q @ S, Z @ S  # Ritz vectors and V times them
        scale = max(theta[0], np.finfo(float).tiny)
        residual = np.linalg.norm(W[:, :k] - U[:, :k] * theta[:k], axis=0) / scale
        wanted = theta[:k]
        if residual.max() <= tol or (
                previous is not None and np.max(np.abs(wanted - previous)) <= rq_tol * scale):
            converged = True
            break
        previous = wanted
        Q, _ = qr(W, mode="economic")
    if not converged:
        warnings.warn(f"power method: no convergence in {max_iter} iterations (direction residual "
                      f"{residual.max():.2e} > {tol})", ConvergenceWarning, stacklevel=2)
    return EigenResult(vectors=U[:, :k], values=np.maximum(theta[:k], 0.0), n_iter=n_iter, converged=converged)


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


@dataclass
class SequentialDesignResult:
    """What one run of the design loop produced.

    Attributes
    ----------
    n_measurements : ndarray of int, shape (T,)
        Number of rows after the initial fit and after every step.
    errors : ndarray, shape (T,)
        Relative error ``||w_hat - w_true|| / ||w_true||`` at those points.
    fit_seconds : ndarray, shape (T,)
        Wall time of each fit.
    coef : ndarray, shape (d,)
        Final estimate.
    X : ndarray, shape (n_final, d)
    y : ndarray, shape (n_final,)
    group_prob : ndarray or None
        Final group probabilities, for methods that have them.
    select_seconds : ndarray, shape (T - 1,)
        Wall time spent choosing the rows of each step (eigenvectors, pool scores).
    checkpoint_n : ndarray of int, shape (K,)
        Numbers of rows at which the estimate was kept (those of ``checkpoints`` that were reached).
    checkpoint_coef : ndarray, shape (K, d)
        The estimates at those numbers of rows.
    converged : ndarray of int8, shape (T,)
        Per fit: 1 converged, 0 not converged, -1 the method has no convergence test (or the fit failed).
    n_iter : ndarray of int, shape (T,)
        Per fit: iterations (or sweeps) the method used; -1 where it does not report them.
    finite : ndarray of bool, shape (T,)
        Per fit: whether the estimate was finite. After a failed fit the run stops: the remaining steps have
        ``errors`` NaN, ``finite`` False and ``converged`` -1.
    failure : str
        Empty, or what went wrong (the step and the error), if a fit failed.
    hyperparameters : dict
        The final fit's values of those of :data:`FITTED_HYPERPARAMETERS` the estimator reports (given or
        learned; ``p0`` averaged over groups); empty if the run failed.
    """

    n_measurements: np.ndarray
    errors: np.ndarray
    fit_seconds: np.ndarray
    coef: np.ndarray
    X: np.ndarray
    y: np.ndarray
    group_prob: np.ndarray | None
    select_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    checkpoint_n: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    checkpoint_coef: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    converged: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    n_iter: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    finite: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    failure: str = ""
    hyperparameters: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """Whether some fit raised a numerical error or returned a non-finite estimate (the run stopped there)."""
        return bool(self.failure)


def has_posterior_covariance(estimator) -> bool:
    """Whether the estimator exposes ``cov_matvec`` (the only thing designed rows need)."""
    return callable(getattr(estimator, "cov_matvec", None))


def run_sequential_design(estimator, w_true, X0, y0, n_steps: int, *, strategy: str, noise_var: float,
                          row_norm: float, rng=None, pool=None, batch_size: int = 1,
                          callback: Callable[[int, int, float], None] | None = None,
                          checkpoints=()) -> SequentialDesignResult:
    """Measure, refit, repeat: the sequential design loop for any estimator.

    Parameters
    ----------
    estimator : scikit-learn style estimator
        Cloned before use (the caller's object is left untouched); refits use ``warm_start=True`` when the
        estimator has that parameter.
    w_true : array-like, shape (d,)
        The signal that measurements are taken of.
    X0 : array-like, shape (n0, d)
        Initial rows.
    y0 : array-like, shape (n0,)
        Initial measurements.
    n_steps : int
        Number of steps; each adds ``batch_size`` rows.
    strategy : {"design", "random", "pool"}
        "design": the leading eigenvector(s) of the posterior covariance scaled to ``row_norm``;
        "random": rows uniform on the sphere of radius ``row_norm`` (like the initial rows);
        "pool": the rows of ``pool`` with the largest ``x^T V x``, each used at most once.
    noise_var : float
        Variance of the Gaussian noise added to every new measurement.
    row_norm : float
        Euclidean norm of designed and random rows.
    rng : None, int or numpy.random.Generator
        Source of random rows, measurement noise and power-method starts (``numpy.random.default_rng``
        semantics: None for fresh entropy, an integer seed, or a Generator used as is).
    pool : array-like, shape (m, d), optional
        Candidate rows for the "pool" strategy (m >= n_steps * batch_size).
    batch_size : int
        Rows added per step (top-k eigenvectors by subspace iteration for "design").
    callback : callable, optional
        Called as ``callback(step, n_measurements, error)`` after every step (progress reporting).
    checkpoints : iterable of int
        Numbers of rows at which to keep a copy of the estimate (e.g. for pictures of reconstructions).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}; got {strategy!r}")
    if strategy != "random" and not has_posterior_covariance(estimator):
        raise ValueError(f"strategy={strategy!r} needs a posterior covariance; {type(estimator).__name__} has "
                         "no cov_matvec, so it can only run with strategy='random'")
    X, y = val.check_design(X0, y0)
    n0, d = X.shape
    w_true = val.check_vector_or_block(w_true, d, "w_true")
    if w_true.ndim != 1:
        raise ValueError(f"w_true must have shape ({d},); got {w_true.shape}")
    n_steps = val.check_count(n_steps, "n_steps", minimum=0)
    batch_size = val.check_count(batch_size, "batch_size")
    if batch_size > d:
        raise ValueError(f"batch_size ({batch_size}) cannot exceed the number of coefficients d ({d})")
    rng = val.check_random_generator(rng)
    noise_var = val.check_positive_scalar(noise_var, "noise_var")
    row_norm = val.check_positive_scalar(row_norm, "row_norm")
    available = None
    if strategy == "pool":
        if pool is None:
            raise ValueError("pool must be given for strategy='pool'")
        pool = val.check_rows(pool, d, "pool")
        if pool.shape[0] < n_steps * batch_size:
            raise ValueError(f"pool has {pool.shape[0]} rows; {n_steps} steps of {batch_size} need "
                             f"{n_steps * batch_size}")
        available = np.ones(pool.shape[0], dtype=bool)

    est = clone(estimator)
    if "warm_start" in est.get_params():
        est.set_params(warm_start=True)
    norm_true = float(np.linalg.norm(w_true))

    rows_X, rows_y = [X], [y]
    n_measurements, errors, fit_seconds, select_seconds = [], [], [], []
    converged, n_iter, finite = [], [], []
    wanted = {int(c) for c in checkpoints}
    kept_n, kept_coef = [], []
    failure = ""

    def fit_and_record(X_all, y_all, step) -> bool:
        """Fit and record; False (with ``failure`` set) if the fit failed numerically."""
        nonlocal failure
        start = time.perf_counter()
        # A ValueError at the first fit is bad input and propagates; later the same estimator on more rows
        # can only fail numerically, which is recorded like a LinAlgError.
        numerical = (np.linalg.LinAlgError, FloatingPointError) if step == 0 else \
            (np.linalg.LinAlgError, FloatingPointError, ValueError)
        try:
            est.fit(X_all, y_all)
        except numerical as exc:
            failure = f"step {step} (n={X_all.shape[0]}): {type(exc).__name__}: {exc}"
        fit_seconds.append(time.perf_counter() - start)
        n_measurements.append(X_all.shape[0])
        coef = np.asarray(est.coef_) if not failure else None
        ok = coef is not None and bool(np.all(np.isfinite(coef)))
        if coef is not None and not ok:
            failure = f"step {step} (n={X_all.shape[0]}): non-finite estimate"
        finite.append(ok)
        errors.append(relative_error(coef, w_true, norm_true) if ok else np.nan)
        flag = getattr(est, "converged_", None) if ok else None
        converged.append(-1 if flag is None else int(bool(flag)))
        iterations = getattr(est, "n_iter_", None) if ok else None
        n_iter.append(-1 if iterations is None else int(iterations))
        if ok and X_all.shape[0] in wanted:
            kept_n.append(X_all.shape[0])
            kept_coef.append(coef.copy())
        return ok

    X_all, y_all = X, y
    ok = fit_and_record(X_all, y_all, 0)
    for step in range(1, n_steps + 1):
        if not ok:  # nothing sensible can be designed from a failed fit: the rest of the run is missing
            n_measurements.append(n_measurements[-1] + batch_size)
            fit_seconds.append(np.nan)
            select_seconds.append(np.nan)
            errors.append(np.nan)
            finite.append(False)
            converged.append(-1)
            n_iter.append(-1)
            continue
        start = time.perf_counter()
        if strategy == "design":
            eig = top_eigenvectors(est.cov_matvec, d, batch_size, rng=rng)
            new_X = (eig.vectors * row_norm).T
        elif strategy == "random":
            new_X = sphere_rows(rng, batch_size, d, row_norm)
        else:
            # argmax of x^T V x = argmax of the predictive variance (they differ by the noise variance)
            _mean, std = est.predict(pool, return_std=True)
            score = np.where(available, std, -np.inf)
            chosen = np.argsort(-score, kind="stable")[:batch_size]
            available[chosen] = False
            new_X = pool[chosen]
        select_seconds.append(time.perf_counter() - start)
        new_y = new_X @ w_true + rng.normal(0.0, np.sqrt(noise_var), size=new_X.shape[0])
        rows_X.append(new_X)
        rows_y.append(new_y)
        X_all, y_all = np.vstack(rows_X), np.concatenate(rows_y)
        ok = fit_and_record(X_all, y_all, step)
        if callback is not None:
            callback(step, X_all.shape[0], errors[-1])

    group_prob = getattr(est, "group_prob_", None) if ok else None
    fitted = {name: float(np.mean(getattr(est, f"{name}_"))) for name in FITTED_HYPERPARAMETERS
              if ok and getattr(est, f"{name}_", None) is not None}
    if failure:
        warnings.warn(f"sequential design: a fit failed at {failure}; the remaining steps are recorded as missing",
                      RuntimeWarning, stacklevel=2)
    return SequentialDesignResult(
        n_measurements=np.asarray(n_measurements, dtype=np.int64), errors=np.asarray(errors, dtype=float),
        fit_seconds=np.asarray(fit_seconds),
        coef=np.asarray(est.coef_, dtype=float).copy() if ok else np.full(d, np.nan), X=X_all, y=y_all,
        group_prob=None if group_prob is None else np.asarray(group_prob).copy(),
        select_seconds=np.asarray(select_seconds, dtype=float), checkpoint_n=np.asarray(kept_n, dtype=np.int64),
        checkpoint_coef=np.asarray(kept_coef).reshape(len(kept_n), d), converged=np.asarray(converged, dtype=np.int8),
        n_iter=np.asarray(n_iter, dtype=np.int64), finite=np.asarray(finite, dtype=bool), failure=failure,
        hyperparameters=fitted)
