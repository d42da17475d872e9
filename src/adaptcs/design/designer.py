"""The ask/tell loop of sequential design: which rows to measure next, from the measurements so far alone.

``ask()`` returns the next rows, the instrument measures them, ``tell(rows, values)`` refits. The designer
never sees the signal; it may be told rows it did not ask for (measurements taken anyway), and it keeps every
row and value it was told. The simulation driver :func:`adaptcs.design.run_sequential_design` is this loop
with measurements made up from a known signal.

Over 500 lines: one class, the designer, whose ask, tell, its failure handling, its history and its convergence
bookkeeping share one state; the row choices themselves are in :mod:`adaptcs.design.eigen` and
:mod:`adaptcs.design.binary`, the operators' gains in :mod:`adaptcs.operators`.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from adaptcs import _validation as val
from adaptcs.bases.prediction import check_prediction_basis, measured_coefficients, single_coefficient_rows
from adaptcs.design.binary import binary_rows
from adaptcs.design.candidates import converged_copy, largest_first, tracked_fit
from adaptcs.design.eigen import top_eigenvectors
from adaptcs.design.prediction import prediction_order
from adaptcs.measurement import sphere_rows
from adaptcs.models._base import with_blas_limit
from adaptcs.operators import PatternOperator

STRATEGIES = ("design", "random", "pool", "sequence", "predict")
FIXED_ROWS = ("pool", "sequence")  # strategies that take their rows from ``pool``
ROW_CONSTRAINTS = ("sphere", "binary")
NO_MEASUREMENTS = "random (no measurements yet)"
RANDOM_START = "random (random start, before designing)"
# "design" and "pool" ask for random rows until this fraction of d rows is told (``n_random_start="auto"``): greedy
# design from almost no data trusts a posterior that is still mostly the prior, whose confident "off" groups the
# designed rows then never revisit (docs/model.md, "Starting from nothing"; benchmarks/bench_design_start.py).
RANDOM_START_FRACTION = 1 / 16  # E3 starts from 32 random rows of d = 512, E7 from d / 16
# Designed rows need x^T V x near its maximum, not the eigenvector to many digits: a Ritz vector with relative
# residual r has x^T V x within about r^2 lambda_1 / gap (and never much more than r lambda_1) of lambda_1.
DESIGN_EIGEN_TOL = 1e-3


class FitFailedWarning(RuntimeWarning):
    """A refit failed numerically (or gave a non-finite estimate); the measurements are kept."""


@dataclass
class Asked:
    """One call of :meth:`SequentialDesigner.ask`.

    Attributes
    ----------
    n_told : int
        Rows told before the call.
    rows : ndarray, shape (k, d)
    chosen_by : str
        The strategy that chose the rows (random rows before any measurement, whatever the strategy).
    scores : ndarray, shape (k,)
        ``x^T V x`` of each row (for a batch of binary rows, under the covariance conditioned on the batch's
        earlier rows); NaN for random rows.
    bound : float
        ``lambda_max ||x||^2``, the largest ``x^T V x`` any row of that norm can have; NaN for random rows.
    seconds : float
        CPU time spent choosing the rows (the process's, all threads).
    """

    n_told: int
    rows: np.ndarray
    chosen_by: str
    scores: np.ndarray
    bound: float
    seconds: float


@dataclass
class Told:
    """One call of :meth:`SequentialDesigner.tell` and the refit it made.

    Attributes
    ----------
    n_told : int
        Rows told so far, these included.
    asked : ndarray of bool, shape (k,)
        Per new row: whether it is a row that was asked for (and not told before).
    fit_seconds : float
        CPU time of the refit (the process's, all threads; not inflated by other jobs on the machine). A Gibbs chain
        resumed from a checkpoint adds the CPU time it took in the processes before (``resumed_cpu_seconds_``).
    converged : int
        1 converged, 0 not converged, -1 the method has no convergence test (or the fit failed).
    n_iter : int
        Iterations of the fit; -1 where the method does not report them.
    residual : float
        How far one more undamped update would move the fit (EP's ``fixed_point_residual_``: relative to the
        largest coefficient); NaN where the method does not report it.
    failure : str
        Empty, or why the fit failed (the error, or "non-finite estimate").
    warning : str
        Empty, or the fit's ConvergenceWarning (why it is not converged, and what to do).
    settle_seconds : float
        CPU time :meth:`SequentialDesigner.converge` spent taking this refit on to its convergence test (0 if not
        called or not needed); included in ``fit_seconds``.
    """

    n_told: int
    asked: np.ndarray
    fit_seconds: float
    converged: int
    n_iter: int
    failure: str
    warning: str = ""
    residual: float = np.nan
    settle_seconds: float = 0.0


def _row_key(row: np.ndarray) -> bytes:
    """A row's exact value as a key (-0.0 and 0.0 alike, as ``==`` has them)."""
    return (np.asarray(row, dtype=float) + 0.0).tobytes()


def _centre_hyperprior(estimator) -> None:
    """An estimator with ``hyperprior="auto"`` (GSS-EP) gets weak priors centred on what it learned by now, for the
    rest of the loop (docs/learning.md, "Weak priors on the learned values"). Called before the first refit after
    ``ceil(d / 16)`` rows were told (the default random start, whatever the strategy and ``n_random_start``: earlier
    values rest on too few rows)."""
    if isinstance(getattr(estimator, "hyperprior", None), str) and estimator.hyperprior == "auto" \
            and hasattr(estimator, "centred_hyperprior"):
        estimator.set_params(hyperprior=estimator.centred_hyperprior())


def has_posterior_covariance(estimator) -> bool:
    """Whether the estimator exposes ``cov_matvec`` (the only thing designed rows need)."""
    return callable(getattr(estimator, "cov_matvec", None))


def _under_the_estimators_blas_limit(method):
    """``method`` of the designer run with its estimator's BLAS threads (the package's rule:
    :mod:`adaptcs.models._base`): the power method and the candidate scores are BLAS work too."""
    return with_blas_limit(method, owner=lambda designer: designer.estimator)


def pool_patterns(pool, basis):
    """A pool as rows on the signal's samples, and the basis to fit in: an array as given, a
    :class:`~adaptcs.operators.PatternOperator`'s patterns in its coarse-to-fine order (its basis unless ``basis``
    is given; the two must then be the same object)."""
    if not isinstance(pool, PatternOperator):
        return pool, basis
    if basis is not None and pool.basis is not None and basis is not pool.basis:
        raise ValueError("the pool operator and the designer have different bases; give the basis once")
    return pool.patterns(pool.coarse_to_fine()), basis if basis is not None else pool.basis


class SequentialDesigner:
    """Ask for the rows to measure next, tell what was measured; repeat.

    Parameters
    ----------
    estimator : scikit-learn style estimator
        Cloned at the first :meth:`tell` (the caller's object is left untouched); refits use
        ``warm_start=True`` when the estimator has that parameter. "design" and "pool" need ``cov_matvec``.
        With a ``basis`` it models the basis coefficients ``c`` of the signal ``x = Psi^T c``.
    strategy : {"design", "random", "pool", "sequence", "predict"}
        "design": rows with the largest ``x^T V x`` under the posterior covariance V (its leading
        eigenvectors, or for binary rows see :mod:`adaptcs.design.binary`); "random": rows uniform on the
        sphere (or uniform random signs); "pool": the rows of ``pool`` with the largest ``x^T V x``, each
        measured at most once; "sequence": the rows of ``pool`` in their order (a design fixed in advance, such as
        coarse-to-fine wavelet rows), each once; "predict": the adaptive basis scan by wavelet prediction
        (Rousset et al. 2017; needs a wavelet ``basis``): basis images, the approximation first, then the
        unmeasured details predicted largest by interpolating the current estimate of the coarser scales
        (:mod:`adaptcs.design.prediction`), each once. Before any measurement "design", "random" and "pool" give
        random rows (the prior covariance of an exchangeable prior is a multiple of the identity: every
        direction is as good); "sequence" and "predict" start their scans.
    row_norm : float, optional
        Euclidean norm of the rows asked for; default ``sqrt(d)`` (the norm of a +-1 row). Binary rows have
        entries ``+-row_norm / sqrt(d)``. Not used by "pool", whose rows are used as given. "predict" rows are
        basis images times ``row_norm``.
    batch_size : int
        Rows per :meth:`ask`.
    pool : array-like of shape (m, d) or :class:`adaptcs.operators.PatternOperator`, optional
        Candidate rows for "pool", the rows in order for "sequence" (an operator: its patterns in its coarse-to-fine
        order, and its basis if it has one and ``basis`` is not given).
    row_constraint : {"sphere", "binary"}
        "binary": rows in ``{-a, +a}^d`` (``a = row_norm / sqrt(d)``), the difference of two complementary
        0/1 patterns of a digital micromirror device.
    rng : None, int or numpy.random.Generator
        Random rows and eigenvector starts (``numpy.random.default_rng`` semantics; a Generator is used as is).
    basis : :class:`adaptcs.bases.images.Basis`, optional
        A sparsifying basis ``Psi``: rows asked for, told and pooled are in the signal's domain (pixels), the
        estimator is fitted on their coefficients ``X Psi^T`` (rows ``Psi x_i``) and designed rows ``a`` are
        returned as ``Psi^T a`` (same norm). See :meth:`reconstruction`. A biorthogonal wavelet basis maps rows by
        :meth:`~adaptcs.bases.images.Basis.row_coefficients` and :meth:`~adaptcs.bases.images.Basis.row_patterns` (then
        ``row_norm`` is the norm of the row on the coefficients, not of the pixel pattern).
    n_random_start : int or "auto"
        "design" and "pool" ask for random rows (random unmeasured pool rows) until this many rows have been
        told; "auto": ``ceil(d / 16)``. Designing from one or two rows loses to random rows (E3's generator, 64 rows
        from nothing, everything learned: error 0.492 against 0.337; after the random start 0.087, better on 20 of
        20 signals: benchmarks/bench_design_start.py). 0 designs from the first row told. Ignored by the other
        strategies.

    Attributes
    ----------
    estimator_ : estimator
        Fitted on every row told so far (None before the first :meth:`tell`).
    X_ : ndarray, shape (n, d)
        Every row told, in order (in the signal's domain).
    y_ : ndarray, shape (n,)
        Their measured values.
    history_ : list of :class:`Asked` and :class:`Told`
        Every call, in order.
    failure_ : str
        Empty, or why the last refit failed (then :meth:`ask` refuses until a refit succeeds).

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.design import SequentialDesigner
    >>> from adaptcs.models import GroupSpikeSlabEP
    >>> groups = np.repeat(np.arange(8), 4)                 # 32 coefficients in groups of 4
    >>> w = np.where(groups < 2, 1.0, 0.0)                  # the unknown signal (only the instrument knows it)
    >>> designer = SequentialDesigner(GroupSpikeSlabEP(groups, p0=0.25, v0=1.0, noise_var=0.01), batch_size=2, rng=0)
    >>> for _ in range(6):
    ...     rows = designer.ask()                           # (2, 32): what to measure next
    ...     _ = designer.tell(rows, rows @ w)               # the instrument's values
    >>> designer.X_.shape
    (12, 32)
    """

    def __init__(self, estimator, *, strategy: str = "design", row_norm: float | None = None, batch_size: int = 1,
                 pool=None, row_constraint: str = "sphere", rng=None, basis=None, n_random_start="auto"):
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}; got {strategy!r}")
        if row_constraint not in ROW_CONSTRAINTS:
            raise ValueError(f"row_constraint must be one of {ROW_CONSTRAINTS}; got {row_constraint!r}")
        if strategy in ("design", "pool") and not has_posterior_covariance(estimator):
            raise ValueError(f"strategy={strategy!r} needs a posterior covariance; {type(estimator).__name__} has "
                             "no cov_matvec, so it can only run with strategy='random' or 'sequence'")
        pool, basis = pool_patterns(pool, basis)
        if strategy in FIXED_ROWS:
            if pool is None:
                raise ValueError(f"pool must be given for strategy={strategy!r}")
            if row_constraint != "sphere":
                raise ValueError("row_constraint applies to designed and random rows; pool rows are used as given")
            pool = val.check_rows(pool, np.shape(pool)[-1], "pool")
        elif pool is not None:
            raise ValueError(f"pool is only used by strategies {FIXED_ROWS}; got strategy={strategy!r}")
        if strategy == "predict":
            check_prediction_basis(basis)
            if row_constraint != "sphere":
                raise ValueError("strategy='predict' measures basis images; row_constraint must be 'sphere'")
        if basis is not None:
            if row_constraint != "sphere":
                raise ValueError("row_constraint='binary' cannot be combined with a basis (binary pixel rows are "
                                 "not binary in the basis)")
            if pool is not None and pool.shape[1] != basis.d:
                raise ValueError(f"pool rows have {pool.shape[1]} entries; the basis has {basis.d} coefficients")
        self.estimator = estimator
        self.strategy = strategy
        self.row_norm = None if row_norm is None else val.check_positive_scalar(row_norm, "row_norm")
        self.batch_size = val.check_count(batch_size, "batch_size")
        self.pool = pool
        self.row_constraint = row_constraint
        self.rng = val.check_random_generator(rng)
        self.basis = basis
        self.n_random_start = n_random_start if n_random_start == "auto" else \
            val.check_count(n_random_start, "n_random_start", minimum=0)
        self._estimator = None
        self.X_: np.ndarray | None = None
        self.y_: np.ndarray | None = None
        self.history_: list[Asked | Told] = []
        self.failure_ = ""
        self._pending = np.zeros((0, 0))
        self._eigen_block = None  # Ritz vectors of the last designed step (and the block iterations it took)
        self._eigen_iterations = 0
        self._pool_used = None if pool is None else np.zeros(pool.shape[0], dtype=bool)
        self._pool_index = None  # pool row indices by value (see _pool_rows_by_value)
        self._A: np.ndarray | None = None  # rows told as the estimator sees them (coefficients with a basis)
        self._pool_model = None if pool is None or basis is None else basis.row_coefficients(pool)
        # a pool of basis images (a single-pixel camera's patterns): the replay's protocol, the approximation's
        # images first and ties in the score broken by a fixed random order (adaptcs.design.basis_scan)
        single, coefficient = (None, None) if self._pool_model is None else \
            single_coefficient_rows(self._pool_model)
        self._scan_pool = strategy == "pool" and single is not None and bool(single.all())
        self._pool_tie_rank = None
        self._tracked = None  # the tracked fit that chooses a basis-image pool's rows (see tell)
        if self._scan_pool:
            self._pool_approximation = basis.scales()[coefficient] == 0
            self._pool_tie_rank = np.argsort(self.rng.permutation(pool.shape[0]))
        # coefficients measured directly by a basis-image row ("predict" never asks for them again)
        self._basis_measured = None if strategy != "predict" else np.zeros(basis.d, dtype=bool)

    # -- what is known ---------------------------------------------------------------------------------------
    @property
    def estimator_(self):
        """The estimator fitted on every row told so far (None before the first :meth:`tell`). With a pool of
        basis images and a tracking estimator (see :meth:`tell`), a fit at the fixed point made when first read
        after a tell (:func:`adaptcs.design.candidates.converged_copy`)."""
        if self._estimator is None and self._tracked is not None and self.X_ is not None:
            self._estimator = converged_copy(self._tracked, self._A, self.y_)
        return self._estimator

    @property
    def tracked_(self):
        """With a pool of basis images and a tracking estimator, the tracked fit that chooses the rows (a few warm
        iterations per tell, not converged: :attr:`estimator_` is the converged fit); else None."""
        return self._tracked

    @property
    def n_features_in_(self) -> int | None:
        """Coefficients per row: from the rows told, the pool, or the estimator's groups (None if unknown)."""
        if self.X_ is not None:
            return self.X_.shape[1]
        if self.pool is not None:
            return self.pool.shape[1]
        if self.basis is not None:
            return self.basis.d
        groups = self.estimator.get_params().get("groups") if hasattr(self.estimator, "get_params") else None
        return None if groups is None or np.ndim(groups) != 1 else len(groups)

    @property
    def n_told_(self) -> int:
        """Rows told so far."""
        return 0 if self.X_ is None else self.X_.shape[0]

    def _row_norm(self, d: int) -> float:
        return float(np.sqrt(d)) if self.row_norm is None else self.row_norm

    def _random_start(self, d: int) -> int:
        """Rows told before "design" and "pool" choose by the posterior (a pool of basis images: none; its
        approximation's images come first instead)."""
        if self._scan_pool:
            return 0
        if self.n_random_start == "auto":
            return int(np.ceil(RANDOM_START_FRACTION * d))
        return self.n_random_start

    def _noise_var(self) -> float:
        noise = getattr(self.estimator_, "noise_var_", None)
        if noise is None:
            noise = self.estimator_.get_params().get("noise_var")
        if noise is None:
            raise ValueError(f"binary design rows need the noise variance; {type(self.estimator_).__name__} reports "
                             "neither noise_var_ nor a noise_var parameter")
        return float(noise)

    # -- ask -------------------------------------------------------------------------------------------------
    @_under_the_estimators_blas_limit
    def ask(self) -> np.ndarray:
        """The next ``batch_size`` rows to measure.

        Returns
        -------
        ndarray, shape (batch_size, d)

        Raises
        ------
        ValueError
            If the number of coefficients is not known yet (tell some measurements first, or give groups or a
            pool), or a pool has too few unmeasured rows left.
        RuntimeError
            If the last refit failed (nothing sensible can be designed from it).
        """
        d = self.n_features_in_
        if d is None:
            raise ValueError("the number of coefficients is not known yet: tell() some measurements first (or use "
                             "an estimator with groups, or a pool)")
        if self.failure_:
            raise RuntimeError(f"the last fit failed ({self.failure_}); tell() more measurements so that a refit "
                               "succeeds before asking for rows")
        k = self.batch_size
        if k > d:
            raise ValueError(f"batch_size ({k}) cannot exceed the number of coefficients d ({d})")
        if self.pool is not None and int(np.sum(~self._pool_used)) < k:
            raise ValueError(f"the pool has {int(np.sum(~self._pool_used))} unmeasured rows left; {k} are asked for")
        start = time.process_time()
        scores, bound = np.full(k, np.nan), np.nan
        norm = self._row_norm(d)
        started = self.X_ is not None or self.strategy in ("sequence", "predict")
        chosen_by = self.strategy if started else NO_MEASUREMENTS
        if chosen_by in ("design", "pool") and self.n_told_ < self._random_start(d):
            chosen_by = RANDOM_START
        if self._scan_pool and np.any(self._pool_approximation & ~self._pool_used):
            first = np.flatnonzero(self._pool_approximation & ~self._pool_used)[:k]
            rest = np.setdiff1d(np.flatnonzero(~self._pool_used), first)
            if first.size < k and self.X_ is None:  # nothing fitted yet: the rest at random
                rest = self.rng.permutation(rest)
                first = np.concatenate([first, rest[:k - first.size]])
            elif first.size < k:
                first = np.concatenate([first, self._pool_rows(k - first.size, exclude=first)[2]])
            rows, chosen_by = self.pool[first], "pool (approximation first)"
        elif chosen_by == "random" or (chosen_by in (NO_MEASUREMENTS, RANDOM_START) and self.pool is None):
            if self.row_constraint == "binary":
                rows = (2.0 * self.rng.integers(0, 2, size=(k, d)) - 1.0) * (norm / np.sqrt(d))
            else:
                rows = sphere_rows(self.rng, k, d, norm)
        elif chosen_by in (NO_MEASUREMENTS, RANDOM_START):
            rows = self.pool[self.rng.choice(np.flatnonzero(~self._pool_used), size=k, replace=False)]
        elif self.strategy == "design":
            rows, scores, bound = self._designed_rows(d, k, norm)
            if self.basis is not None:
                rows = self.basis.row_patterns(rows)
        elif self.strategy == "sequence":
            rows = self.pool[np.flatnonzero(~self._pool_used)[:k]]
        elif self.strategy == "predict":
            coef = np.zeros(d) if self.estimator_ is None else np.asarray(self.estimator_.coef_, dtype=float)
            chosen = prediction_order(self.basis, coef, self._basis_measured, k)
            unit = np.zeros((k, d))
            unit[np.arange(k), chosen] = norm
            rows = self.basis.row_patterns(unit)
        else:
            rows, scores, _chosen = self._pool_rows(k)
        self.history_.append(Asked(n_told=self.n_told_, rows=rows.copy(), chosen_by=chosen_by, scores=scores,
                                   bound=bound, seconds=time.process_time() - start))
        self._pending = rows.copy()
        return rows

    def _designed_rows(self, d: int, k: int, norm: float):
        est = self.estimator_
        if self.row_constraint == "binary":
            chosen = binary_rows(est.cov_matvec, est.coef_var_, k, self._noise_var(), rng=self.rng)
            amplitude2 = norm * norm / d
            return chosen.rows * np.sqrt(amplitude2), chosen.scores * amplitude2, float(chosen.bounds[0]) * amplitude2
        # Start from the last step's Ritz vectors: one new row and a refit change V little, except along the row.
        eig = top_eigenvectors(est.cov_matvec, d, k, rng=self.rng, tol=DESIGN_EIGEN_TOL, start=self._eigen_block)
        self._eigen_block, self._eigen_iterations = eig.block, eig.n_iter
        return (eig.vectors * norm).T, eig.values * norm * norm, float(eig.values[0]) * norm * norm

    def _pool_rows(self, k: int, exclude=()):
        # argmax of x^T V x = argmax of the predictive variance (they differ by the noise variance)
        pool = self.pool if self._pool_model is None else self._pool_model
        chooser = self._estimator if self._tracked is None else self._tracked
        _mean, std = chooser.predict(pool, return_std=True)
        used = self._pool_used.copy()
        used[np.asarray(exclude, dtype=np.intp)] = True
        if self._pool_tie_rank is None:
            chosen = np.argsort(-np.where(used, -np.inf, std), kind="stable")[:k]
        else:  # scores equal to 10 digits are ties (one context's unmeasured basis images), in a random order
            chosen = largest_first(std, used, k, self._pool_tie_rank)
        noise = getattr(chooser, "noise_var_", np.nan)
        return self.pool[chosen], std[chosen] ** 2 - noise, chosen

    # -- tell ------------------------------------------------------------------------------------------------
    def not_converged_summary(self) -> str:
        """How many refits did not converge, where, and why the first did; empty when every refit converged."""
        told = [entry for entry in self.history_ if isinstance(entry, Told)]
        missed = [entry for entry in told if entry.converged == 0]
        if not missed:
            return ""
        where = f"at {missed[0].n_told} rows" if len(missed) == 1 else \
            f"between {missed[0].n_told} and {missed[-1].n_told} rows"
        last = "; the last refit converged" if told[-1].converged == 1 else "; the last refit did not converge"
        residuals = np.array([entry.residual for entry in missed], dtype=float)
        residuals = residuals[np.isfinite(residuals)]
        distance = (f"; residual {np.median(residuals):.2g} in the median, at most {np.max(residuals):.2g}"
                    if residuals.size else "")
        return (f"{len(missed)} of {len(told)} refits did not converge ({where}{last}{distance}). Why, each: "
                "history_; what it means: docs/model.md, 'When a fit does not converge'.")

    @_under_the_estimators_blas_limit
    def tell(self, X_new, y_new) -> SequentialDesigner:
        """Add measured rows and their values, then refit on everything told so far.

        Parameters
        ----------
        X_new : array-like, shape (k, d) or (d,)
            Rows measured: those :meth:`ask` returned, or any others.
        y_new : array-like, shape (k,) or scalar
            Their measured values.

        Bad input (wrong width, non-finite values, a row count that does not match the values, entries whose
        square overflows or that are 1e10 times larger than everything told before) raises ValueError and
        changes nothing. A refit that fails numerically keeps the measurements, sets
        ``failure_`` and warns (:class:`FitFailedWarning`).
        """
        X_new, y_new, A_new = self._checked(X_new, y_new)
        d = X_new.shape[1]
        first = self.X_ is None
        X_all = X_new if first else np.vstack([self.X_, X_new])
        A_all = A_new if first else np.vstack([self._A, A_new])
        y_all = y_new if first else np.concatenate([self.y_, y_new])
        est = self._estimator if self._tracked is None else self._tracked
        if first:
            est = clone(self.estimator)
            if "warm_start" in est.get_params():
                est.set_params(warm_start=True)
        elif not self.failure_ and self.X_.shape[0] >= np.ceil(RANDOM_START_FRACTION * d):
            _centre_hyperprior(est)  # on the last fit (as read: after converge, if it was called)
        # a pool of basis images and an estimator that tracks its hyper-parameters (WaveletTreeSpikeSlab): the
        # replay's protocol, a few warm iterations per refit to choose the rows (they may stop before EM has
        # converged: recorded as converged -1) and, when estimator_ is read, a copy fitted to convergence
        tracking = getattr(est, "replay_tracking_iterations", None) if self._scan_pool else None
        # A ValueError at the first fit is bad input and propagates (nothing is kept); later the same
        # estimator on more rows can only fail numerically, which is recorded like a LinAlgError.
        numerical = (np.linalg.LinAlgError, FloatingPointError) if first else \
            (np.linalg.LinAlgError, FloatingPointError, ValueError)
        failure = ""
        start = time.process_time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if tracking is None:
                    est.fit(A_all, y_all)
                else:
                    tracked_fit(est, A_all, y_all, tracking)
                    self._tracked = est
            except numerical as exc:
                failure = f"{type(exc).__name__}: {exc}"
        # A Gibbs chain resumed from a checkpoint took CPU in the processes before this one too.
        fit_seconds = time.process_time() - start + (0.0 if failure else getattr(est, "resumed_cpu_seconds_", 0.0))
        convergence = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
        for w in caught:  # other warnings pass on as they came
            if not issubclass(w.category, ConvergenceWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if not failure and not np.all(np.isfinite(est.coef_)):
            failure = "non-finite estimate"
        self._estimator = None if tracking is not None else est
        asked = self._record(X_new, A_new, X_all, A_all, y_all)
        flag = None if failure or tracking is not None else getattr(est, "converged_", None)
        iterations = None if failure else getattr(est, "n_iter_", None)
        residual = np.nan if failure else float(getattr(est, "fixed_point_residual_", np.nan))
        warned = any(isinstance(entry, Told) and entry.warning for entry in self.history_)
        self.history_.append(Told(n_told=X_all.shape[0], asked=asked, fit_seconds=fit_seconds,
                                  converged=-1 if flag is None else int(bool(flag)),
                                  n_iter=-1 if iterations is None else int(iterations), failure=failure,
                                  warning=" ".join(convergence), residual=residual))
        self.failure_ = failure
        if convergence and not warned:  # once per loop (the first refit that is not converged), not once per step
            warnings.warn(f"refit on {X_all.shape[0]} rows: {' '.join(convergence)} Later ones are counted: "
                          "not_converged_summary().", ConvergenceWarning, stacklevel=3)
        if failure:
            warnings.warn(f"the fit on {X_all.shape[0]} rows failed ({failure}); the measurements are kept",
                          FitFailedWarning, stacklevel=3)
        return self

    def tell_fitted(self, X, y, tracked) -> SequentialDesigner:
        """Tell rows that an earlier session fitted, with that session's tracked fit in place of refits.

        For a pool of basis images and an estimator that tracks its hyper-parameters (see :meth:`tell`); the lab
        keeps the tracked fit in its state file between commands (:mod:`adaptcs.lab.rows`). The designer then stands
        where the earlier session's designer stood after its last tell: its next :meth:`ask` and :meth:`tell` are
        the ones that designer would make, to the last digit.

        Parameters
        ----------
        X : array-like, shape (n, d)
            Every row the earlier session told, in the order told.
        y : array-like, shape (n,)
            Their values.
        tracked : estimator
            The earlier session's tracked fit (:attr:`tracked_`) after its last tell, on exactly these rows;
            nothing here can check its numbers against them.

        Raises
        ------
        ValueError
            Before anything is changed: rows already told, no pool of basis images, an estimator that does not
            track, or rows and values that :meth:`tell` would refuse.
        """
        if self.X_ is not None:
            raise ValueError("tell_fitted() replaces the first tell(); rows have been told already")
        if not self._scan_pool or getattr(tracked, "replay_tracking_iterations", None) is None:
            raise ValueError("tell_fitted() needs a pool of basis images and an estimator that tracks its "
                             "hyper-parameters (WaveletTreeSpikeSlab); use tell()")
        X, y, A = self._checked(X, y)
        if getattr(tracked, "n_features_in_", None) != A.shape[1]:
            raise ValueError(f"the tracked fit is not fitted on {A.shape[1]} coefficients")
        self._tracked, self._estimator, self.failure_ = tracked, None, ""
        asked = self._record(X, A, X, A, y)
        self.history_.append(Told(n_told=X.shape[0], asked=asked, fit_seconds=0.0, converged=-1,
                                  n_iter=int(tracked.n_iter_), failure="", warning="", residual=np.nan))
        return self

    def _checked(self, X_new, y_new) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows and values as :meth:`tell` takes them (checked against what was told before), and the rows as the
        estimator sees them (coefficients with a basis). ValueError on bad input."""
        X_new = np.atleast_2d(np.asarray(X_new, dtype=float)) if np.ndim(X_new) == 1 else X_new
        X_new, y_new = val.check_design(X_new, np.atleast_1d(y_new))
        d = self.n_features_in_
        if d is not None and X_new.shape[1] != d:
            raise ValueError(f"rows must have {d} entries (coefficients); got {X_new.shape[1]}")
        first = self.X_ is None
        val.check_measurement_scale(X_new, y_new, None if first else self.X_, None if first else self.y_)
        return X_new, y_new, X_new if self.basis is None else self.basis.row_coefficients(X_new)

    def _record(self, X_new, A_new, X_all, A_all, y_all) -> np.ndarray:
        """Keep everything told and mark the new rows used (pending asked rows, pool rows, measured basis
        coefficients); returns which new rows were asked for."""
        self.X_, self._A, self.y_ = X_all, A_all, y_all
        asked = self._match_asked(X_new)
        if self._basis_measured is not None:
            self._basis_measured |= measured_coefficients(A_new)
        if self._pool_used is not None:
            for row in X_new:  # the first unused pool row equal to it, if any
                hit = next((i for i in self._pool_rows_by_value().get(_row_key(row), ()) if not self._pool_used[i]),
                           None)
                if hit is not None:
                    self._pool_used[hit] = True
        return asked

    @_under_the_estimators_blas_limit
    def converge(self) -> Told:
        """Take the last refit on to its convergence test, for a fit that someone reads (a checkpoint, the loop's
        last fit): the estimator's ``converge`` (GSS-EP: :meth:`adaptcs.models.GroupSpikeSlabEP.converge`) where
        the refit stopped short. Intermediate refits that only choose the next rows need not.

        Returns the last entry of ``history_``, updated: ``converged``, ``n_iter`` and ``residual`` of the fit now,
        ``fit_seconds`` including this (``settle_seconds`` apart). A refit that failed, converged, or whose
        estimator has no ``converge`` is left as it is.
        """
        told = self.last_fit
        est = self._estimator
        if told is None or told.failure or told.converged != 0 or est is None or not hasattr(est, "converge"):
            return told
        start = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # the refit's own warning stands where it stays short
            try:
                est.converge(self._A, self.y_)
            except (np.linalg.LinAlgError, FloatingPointError, ValueError) as exc:  # keep the refit as it was
                warnings.warn(f"converging the fit on {self.n_told_} rows failed ({type(exc).__name__}: {exc}); "
                              "the refit is kept as it stopped", FitFailedWarning, stacklevel=2)
                return told
        seconds = time.process_time() - start
        told.converged = int(bool(est.converged_))
        told.n_iter = int(est.n_iter_)
        told.residual = float(est.fixed_point_residual_)
        told.fit_seconds += seconds
        told.settle_seconds = seconds
        if est.converged_:  # else the fit is the refit as it stopped, and so is its warning
            told.warning = ""
        return told

    def _pool_rows_by_value(self) -> dict:
        """The pool's row indices by row value (built once: matching a told row to the pool is then O(d), not a
        comparison with every pool row)."""
        if self._pool_index is None:
            self._pool_index = {}
            for i, row in enumerate(self.pool):
                self._pool_index.setdefault(_row_key(row), []).append(i)
        return self._pool_index

    def _match_asked(self, X_new: np.ndarray) -> np.ndarray:
        """Which new rows are pending asked rows (each asked row matches once); the matched ones stop pending."""
        asked = np.zeros(X_new.shape[0], dtype=bool)
        if self._pending.shape[1] != X_new.shape[1]:
            return asked
        pending = np.ones(self._pending.shape[0], dtype=bool)
        for i, row in enumerate(X_new):
            hit = np.flatnonzero(pending & (self._pending == row).all(axis=1))
            if hit.size:
                asked[i] = True
                pending[hit[0]] = False
        self._pending = self._pending[pending]
        return asked

    def reconstruction(self) -> np.ndarray:
        """The current estimate of the signal in its own domain, shape (d,): ``Psi^T coef_`` with a basis, else
        the estimator's ``coef_``."""
        if self.estimator_ is None:
            raise ValueError("nothing has been told yet")
        coef = np.asarray(self.estimator_.coef_, dtype=float)
        return coef.copy() if self.basis is None else self.basis.synthesize(coef)

    @property
    def last_fit(self) -> Told | None:
        """The record of the last refit (None before the first :meth:`tell`)."""
        return next((h for h in reversed(self.history_) if isinstance(h, Told)), None)
