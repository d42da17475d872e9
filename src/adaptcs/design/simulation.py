"""The sequential design loop as a simulation: a known signal answers the designer's questions.

:func:`run_sequential_design` drives a :class:`adaptcs.design.SequentialDesigner` and makes up each
measurement from ``w_true`` with Gaussian noise, recording the error after every refit. The random stream is
shared by the designer (random rows, eigenvector starts) and the simulated noise, in that order per step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from adaptcs import _validation as val
from adaptcs.design._loop_checkpoint import KEYS, LoopCheckpoint
from adaptcs.design.designer import (
    STRATEGIES,
    FitFailedWarning,
    SequentialDesigner,
    has_posterior_covariance,
    pool_patterns,
)
from adaptcs.metrics import relative_error

# Hyper-parameters an estimator may report after fitting (attribute name + "_"), given or learned: the prior
# probability of a group, the slab variance, the noise variance, the (group) lasso penalty.
FITTED_HYPERPARAMETERS = ("p0", "v0", "noise_var", "alpha")


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
        Final estimate (of the signal: with a basis, ``Psi^T`` of the estimated coefficients).
    X : ndarray, shape (n_final, d)
    y : ndarray, shape (n_final,)
    group_prob : ndarray or None
        Final group probabilities, for methods that have them (of the basis coefficients' groups with a basis).
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
    residual : ndarray, shape (T,)
        Per fit: how far one more undamped update would move it (EP's ``fixed_point_residual_``, relative to the
        largest coefficient); NaN where the method does not report it or the fit failed.
    finite : ndarray of bool, shape (T,)
        Per fit: whether the estimate was finite. After a failed fit the run stops: the remaining steps have
        ``errors`` NaN, ``finite`` False and ``converged`` -1.
    failure : str
        Empty, or what went wrong (the step and the error), if a fit failed.
    hyperparameters : dict
        The final fit's values of those of :data:`FITTED_HYPERPARAMETERS` the estimator reports (given or
        learned; ``p0`` averaged over groups); empty if the run failed.
    blocks_not_converged : ndarray of int, shape (T,), optional
        Per fit of a model whose posterior falls into independent blocks (k-space lines), the blocks that had not
        reached EP's fixed point; None for other models.
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
    residual: np.ndarray = field(default_factory=lambda: np.zeros(0))
    finite: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    failure: str = ""
    hyperparameters: dict = field(default_factory=dict)
    blocks_not_converged: np.ndarray | None = None

    @property
    def failed(self) -> bool:
        """Whether some fit raised a numerical error or returned a non-finite estimate (the run stopped there)."""
        return bool(self.failure)


def run_sequential_design(estimator, w_true, X0, y0, n_steps: int, *, strategy: str, noise_var: float,
                          row_norm: float, rng=None, pool=None, batch_size: int = 1,
                          callback: Callable[[int, int, float], None] | None = None,
                          checkpoints=(), row_constraint: str = "sphere", basis=None,
                          settle_reported: bool = True, resume_file=None,
                          save_seconds: float = 60.0) -> SequentialDesignResult:
    """Measure, refit, repeat: the sequential design loop for any estimator.

    Parameters
    ----------
    estimator : scikit-learn style estimator
        Cloned before use (the caller's object is left untouched); refits use ``warm_start=True`` when the
        estimator has that parameter.
    w_true : array-like, shape (d,)
        The signal that measurements are taken of (in its own domain, e.g. pixels, also with a ``basis``).
    X0 : array-like, shape (n0, d)
        Initial rows (in the signal's domain): the random start; every later row is chosen by ``strategy``
        (``SequentialDesigner(n_random_start=0)``).
    y0 : array-like, shape (n0,)
        Initial measurements.
    n_steps : int
        Number of steps; each adds ``batch_size`` rows.
    strategy : {"design", "random", "pool", "sequence", "predict"}
        "design": the leading eigenvector(s) of the posterior covariance scaled to ``row_norm``;
        "random": rows uniform on the sphere of radius ``row_norm`` (like the initial rows);
        "pool": the rows of ``pool`` with the largest ``x^T V x``, each used at most once;
        "sequence": the rows of ``pool`` in their order (a non-adaptive design fixed in advance);
        "predict": the adaptive basis scan by wavelet prediction (needs a wavelet ``basis``; see
        :class:`adaptcs.design.SequentialDesigner`).
    noise_var : float
        Variance of the Gaussian noise added to every new measurement.
    row_norm : float
        Euclidean norm of designed and random rows.
    rng : None, int or numpy.random.Generator
        Source of random rows, measurement noise and power-method starts (``numpy.random.default_rng``
        semantics: None for fresh entropy, an integer seed, or a Generator used as is).
    pool : array-like of shape (m, d) or :class:`adaptcs.operators.PatternOperator`, optional
        Candidate rows for "pool", the rows in order for "sequence" (m >= n_steps * batch_size); an operator gives
        its patterns (:func:`adaptcs.design.designer.pool_patterns`).
    batch_size : int
        Rows added per step (top-k eigenvectors by subspace iteration for "design").
    callback : callable, optional
        Called as ``callback(step, n_measurements, error)`` after every step (progress reporting), before the
        step's checkpoint save: a loop ended by SIGTERM has reported every step it saved, and one that raises in
        the callback goes on, when run again, from the save before it.
    checkpoints : iterable of int
        Numbers of rows at which to keep a copy of the estimate (e.g. for pictures of reconstructions).
    row_constraint : {"sphere", "binary"}
        "binary": designed and random rows in ``{-a, +a}^d`` with ``a = row_norm / sqrt(d)`` (see
        :class:`adaptcs.design.SequentialDesigner`).
    basis : :class:`adaptcs.bases.images.Basis`, optional
        Fit the signal's coefficients in this orthonormal basis (see :class:`adaptcs.design.SequentialDesigner`);
        errors, ``coef`` and checkpoints are of the signal.
    settle_reported : bool
        Take the fits that are read, those at ``checkpoints`` and the last one, on to their convergence test where
        the refit stopped short (:meth:`SequentialDesigner.converge`; the first fit, from scratch, does that by
        itself); the refits between them only choose the next rows and may stop early (``converged`` says so).
    resume_file : str or path, optional
        Keep the loop's state in this file every ``save_seconds`` of wall time (at the end of a step), and go on
        from it if it is there when the loop starts (:mod:`adaptcs.design._loop_checkpoint`): a loop killed
        part-way and run again with the same arguments and file gives the result of one never stopped. SIGTERM (a
        scheduler's time limit) is held until the step under way ends, which saves; then the process ends by it.
        The file must name this loop only (the caller's job: the workflow names it by a digest of the job, the
        replicate's data and the code); it is removed when the loop ends.
    save_seconds : float
        Seconds of wall time between saves of ``resume_file`` (0: after every step).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}; got {strategy!r}")
    if strategy in ("design", "pool") and not has_posterior_covariance(estimator):
        raise ValueError(f"strategy={strategy!r} needs a posterior covariance; {type(estimator).__name__} has "
                         "no cov_matvec, so it can only run with strategy='random' or 'sequence'")
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
    pool, basis = pool_patterns(pool, basis)
    if strategy in ("pool", "sequence"):
        if pool is None:
            raise ValueError(f"pool must be given for strategy={strategy!r}")
        pool = val.check_rows(pool, d, "pool")
        if pool.shape[0] < n_steps * batch_size:
            raise ValueError(f"pool has {pool.shape[0]} rows; {n_steps} steps of {batch_size} need "
                             f"{n_steps * batch_size}")
    save_seconds = val.check_nonnegative_scalar(save_seconds, "save_seconds")
    saved_loop = LoopCheckpoint(resume_file, save_seconds)
    state = saved_loop.load()
    if state is None:
        # The initial rows X are the protocol's random start: every later row is chosen by ``strategy``.
        designer = SequentialDesigner(estimator, strategy=strategy, row_norm=row_norm, batch_size=batch_size,
                                      pool=pool, row_constraint=row_constraint, rng=rng, basis=basis,
                                      n_random_start=0)
        record = _Record(w_true, checkpoints)
    else:  # the generator is the designer's own (one pickle keeps them one object)
        designer, record, rng, ok, done = (state[k] for k in KEYS)
    reported = {int(c) for c in checkpoints} | {n0 + n_steps * batch_size}

    def tell(X_new, y_new, step) -> bool:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FitFailedWarning)  # reported once, at the end
            warnings.simplefilter("ignore", ConvergenceWarning)  # summarised once, at the end
            designer.tell(X_new, y_new)
            if settle_reported and designer.n_told_ in reported:  # the first fit, from scratch, goes on by itself
                designer.converge()
        return record.fit(designer, step)

    with saved_loop:  # SIGTERM waits for the end of the step under way, which saves (LoopCheckpoint)
        if state is None:
            ok, done = tell(X, y, 0), 0
            saved_loop.save_if_due(designer=designer, record=record, rng=rng, ok=ok, step=0)
        for step in range(done + 1, n_steps + 1):
            if not ok:  # nothing sensible can be designed from a failed fit: the rest of the run is missing
                record.missing(batch_size)
                continue
            new_X = designer.ask()
            record.select_seconds.append(designer.history_[-1].seconds)
            new_y = new_X @ w_true + rng.normal(0.0, np.sqrt(noise_var), size=new_X.shape[0])
            ok = tell(new_X, new_y, step)
            if callback is not None:  # before the save: a step saved on SIGTERM has been reported
                callback(step, designer.n_told_, record.errors[-1])
            saved_loop.save_if_due(designer=designer, record=record, rng=rng, ok=ok, step=step)

    est = designer.estimator_
    group_prob = getattr(est, "group_prob_", None) if ok else None
    fitted = {name: float(np.mean(getattr(est, f"{name}_"))) for name in FITTED_HYPERPARAMETERS
              if ok and getattr(est, f"{name}_", None) is not None}
    if record.failure:
        warnings.warn(f"sequential design: a fit failed at {record.failure}; the remaining steps are recorded as "
                      "missing", RuntimeWarning, stacklevel=2)
    summary = designer.not_converged_summary()
    if summary:
        warnings.warn(f"sequential design: {summary}", ConvergenceWarning, stacklevel=2)
    saved_loop.remove()
    return SequentialDesignResult(
        n_measurements=np.asarray(record.n_measurements, dtype=np.int64),
        errors=np.asarray(record.errors, dtype=float), fit_seconds=np.asarray(record.fit_seconds),
        coef=designer.reconstruction() if ok else np.full(d, np.nan), X=designer.X_, y=designer.y_,
        group_prob=None if group_prob is None else np.asarray(group_prob).copy(),
        select_seconds=np.asarray(record.select_seconds, dtype=float),
        checkpoint_n=np.asarray(record.kept_n, dtype=np.int64),
        checkpoint_coef=np.asarray(record.kept_coef).reshape(len(record.kept_n), d),
        converged=np.asarray(record.converged, dtype=np.int8), n_iter=np.asarray(record.n_iter, dtype=np.int64),
        residual=np.asarray(record.residual, dtype=float), finite=np.asarray(record.finite, dtype=bool),
        failure=record.failure, hyperparameters=fitted)


class _Record:
    """The per-fit columns of a :class:`SequentialDesignResult`, filled as the loop runs."""

    def __init__(self, w_true: np.ndarray, checkpoints):
        self.w_true = w_true
        self.norm_true = float(np.linalg.norm(w_true))
        self.wanted = {int(c) for c in checkpoints}
        self.n_measurements, self.errors, self.fit_seconds, self.select_seconds = [], [], [], []
        self.converged, self.n_iter, self.residual, self.finite = [], [], [], []
        self.kept_n, self.kept_coef = [], []
        self.failure = ""

    def fit(self, designer: SequentialDesigner, step: int) -> bool:
        """Record the designer's last refit; False (with ``failure`` set) if it failed."""
        told = designer.last_fit
        n = told.n_told
        ok = not told.failure
        if not ok:
            self.failure = f"step {step} (n={n}): {told.failure}"
        coef = designer.reconstruction() if ok else None
        self.fit_seconds.append(told.fit_seconds)
        self.n_measurements.append(n)
        self.finite.append(ok)
        self.errors.append(relative_error(coef, self.w_true, self.norm_true) if ok else np.nan)
        self.converged.append(told.converged)
        self.n_iter.append(told.n_iter)
        self.residual.append(told.residual)
        if ok and n in self.wanted:
            self.kept_n.append(n)
            self.kept_coef.append(coef.copy())
        return ok

    def missing(self, batch_size: int) -> None:
        """A step after a failed fit: recorded as missing."""
        self.n_measurements.append(self.n_measurements[-1] + batch_size)
        self.fit_seconds.append(np.nan)
        self.select_seconds.append(np.nan)
        self.errors.append(np.nan)
        self.finite.append(False)
        self.converged.append(-1)
        self.n_iter.append(-1)
        self.residual.append(np.nan)
