"""The variational garrote (Kappen & Gomez, Machine Learning 96, 2014), grouped and ungrouped.

Model: ``y = sum_g s_g X_g w_g + noise``, ``noise ~ N(0, s2 I)``, selectors ``s_g ~ Bernoulli(sig(gamma_g))``, a
flat prior on w (a MAP point estimate) and a mean-field ``q(s) = prod_g Bernoulli(m_g)``. With
``v_g = m_g w_g`` (the estimate of the signal) the expected squared error is a "variational ridge",

    E_q ||y - sum_g s_g X_g w_g||^2 = ||y - X v||^2 + sum_g (1 - m_g) / m_g ||X_g v_g||^2,

and the free energy is minimised over (m, v, beta = 1/s2) by the fixed-point equations

    v:    (X^T X + blockdiag(c_g X_g^T X_g)) v = X^T y,           c_g = (1 - m_g) / m_g
    m:    m_g = sig(gamma_g + (beta/2) ||X_g v_g||^2 / m_g^2)
    beta: 1/beta = (y^T y - y^T X v) / n                             (or beta fixed)

Each group block is orthonormalised once (``X_g = U_g R_g``, thin QR) so that ``||X_g v_g|| = ||xi_g||`` with
``xi_g = R_g v_g``. The v-equation is solved in the dual (an n x n Cholesky of
``A = I + sum_g Lambda_g U_g U_g^T``, ``Lambda_g = m_g / (1 - m_g)``; Kappen & Gomez's appendix B) when n < d,
else in the primal (d x d). The m-updates are damped by a step that halves whenever the free energy rises.
gamma is followed along a path from where nothing is selected (forward, warm-started; stopped when the
selection has as many effective coefficients as rows) and back (backward), keeping at each gamma the solution
with the lower free energy. gamma is reported at ``logit(p0)`` with Occam offsets matched to a
spike-and-slab prior with slab variance v0 ("matched"), chosen by K-fold cross-validation ("cv"), or given.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from numbers import Real

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.special import expit, logit
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from adaptcs import _validation as val
from adaptcs.models import _constraints as constraints
from adaptcs.models._base import GroupRegressor

M_LOW, M_HIGH = 1e-10, 1.0 - 1e-8  # m is kept inside (0, 1): the dual stays finite
START_M = 1e-6
GAMMA_MIN_EPS = 1e-4  # at gamma_min every m_g <= this
BETA_MAX_FACTOR = 1e3  # with beta estimated, the forward sweep stops at beta >= 1e3 n / y^T y
MATCHED_GRID = (20, 7, 6.0)  # 20 values up to logit(p0), then 7 more up to logit(p0) + 6
GAMMA_SELECTIONS = ("matched", "cv")
FORMS = ("auto", "dual", "primal")
ILL_CONDITIONED = 1e3  # condition number of X above which fit warns (see condition_number_)


class _GroupBasis:
    """Orthonormal bases of the group blocks of X: ``X[:, members_g] = U_g R_g``.

    Coefficients are kept in group-sorted order (``order``); ``starts`` are the group boundaries in it.
    """

    def __init__(self, X: np.ndarray, coef_group: np.ndarray, n_groups: int):
        n, d = X.shape
        self.order = np.argsort(coef_group, kind="stable")
        self.sizes = np.bincount(coef_group, minlength=n_groups)
        if self.sizes.max() > n:
            raise ValueError(f"a group has {self.sizes.max()} coefficients but there are only {n} rows: the "
                             "variational garrote needs every group block X_g to have full column rank")
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        self.col_group = coef_group[self.order]  # group of each sorted column
        Xs = X[:, self.order]
        self.U = np.empty(Xs.shape, order="C")
        self.classes = []  # per group size: (sorted columns, R of shape (k, size, size))
        for size in np.unique(self.sizes):
            groups = np.flatnonzero(self.sizes == size)
            cols = (self.starts[groups][:, None] + np.arange(size)).ravel()
            blocks = Xs[:, cols].reshape(n, groups.size, size).transpose(1, 0, 2)  # (k, n, size)
            Q, R = np.linalg.qr(blocks)
            self.U[:, cols] = Q.transpose(1, 0, 2).reshape(n, -1)
            self.classes.append((groups, cols, R))
        diag = np.abs(np.concatenate([np.diagonal(R, axis1=1, axis2=2).ravel() for _, _, R in self.classes]))
        if diag.min() <= 1e-10 * diag.max():
            raise ValueError("the columns of a group are linearly dependent (or a column is zero): the variational "
                             "garrote needs every group block X_g to have full column rank")

    def group_sums(self, values: np.ndarray) -> np.ndarray:
        """Sum of a per-sorted-column quantity over each group, shape (G,)."""
        return np.add.reduceat(values, self.starts)

    def coefficients(self, xi: np.ndarray) -> np.ndarray:
        """v in the original coefficient order from xi (sorted order): ``v_g = R_g^{-1} xi_g``."""
        v_sorted = np.empty_like(xi)
        for groups, cols, R in self.classes:
            v_sorted[cols] = np.linalg.solve(R, xi[cols].reshape(groups.size, -1, 1)).ravel()
        v = np.empty_like(v_sorted)
        v[self.order] = v_sorted
        return v

    def occam_offsets(self, v0_over_s2: float) -> np.ndarray:
        """``-1/2 log det(I + (v0/s2) X_g^T X_g)`` per group, shape (G,): the cost of a slab N(0, v0 I) that VG's
        flat prior does not pay."""
        out = np.empty(self.sizes.shape[0])
        for groups, _cols, R in self.classes:
            gram = np.matmul(R.transpose(0, 2, 1), R)
            out[groups] = -0.5 * np.linalg.slogdet(np.eye(R.shape[1]) + v0_over_s2 * gram)[1]
        return out


@dataclass
class _Solution:
    """The variational state at one m: what the m-update and the free energy need."""

    m: np.ndarray  # (G,)
    xi: np.ndarray  # (d,), group-sorted
    proj2: np.ndarray  # (G,), ||U_g^T alpha||^2 with alpha = y - X v
    beta: float
    free_energy: float
    n_iter: int = 0
    converged: bool = True


class _VGProblem:
    """The variational garrote on one (X, y): evaluations at m, the inner iteration and the gamma path."""

    def __init__(self, X: np.ndarray, y: np.ndarray, coef_group: np.ndarray, n_groups: int, beta: float | None,
                 form: str, tol: float, max_iter: int):
        self.n, self.d = X.shape
        self.basis = _GroupBasis(X, coef_group, n_groups)
        self.y = y
        self.yy = float(y @ y)
        self.Uty = self.basis.U.T @ y
        self.fixed_beta = beta
        self.dual = form == "dual" or (form == "auto" and self.n < self.d)
        self.UtU = None if self.dual else self.basis.U.T @ self.basis.U
        self.tol = tol
        self.max_iter = max_iter

    def evaluate(self, m: np.ndarray, gamma: np.ndarray) -> _Solution:
        """Solve the v-equation at m; beta and the free energy there."""
        U, col = self.basis.U, self.basis.col_group
        if self.dual:
            lam_col = (m / (1.0 - m))[col]
            A = (U * lam_col) @ U.T
            A[np.diag_indices_from(A)] += 1.0
            alpha = cho_solve(cho_factor(A, lower=True), self.y)
            Ua = U.T @ alpha
            xi = lam_col * Ua
            yta = float(self.y @ alpha)
        else:
            M = self.UtU.copy()
            M[np.diag_indices_from(M)] += ((1.0 - m) / m)[col]
            xi = cho_solve(cho_factor(M, lower=True), self.Uty)
            Ua = self.Uty - self.UtU @ xi
            yta = self.yy - float(self.Uty @ xi)
        yta = max(yta, np.finfo(float).tiny)
        beta = self.n / yta if self.fixed_beta is None else self.fixed_beta
        entropy = np.sum(m * np.log(m) + (1.0 - m) * np.log1p(-m))
        free = (0.5 * self.n * np.log(2.0 * np.pi / beta) + 0.5 * beta * yta - float(gamma @ m)
                + float(np.sum(np.logaddexp(0.0, gamma))) + entropy)
        return _Solution(m=m, xi=xi, proj2=self.basis.group_sums(Ua * Ua), beta=beta, free_energy=free)

    def solve(self, m: np.ndarray, gamma: np.ndarray) -> _Solution:
        """Fixed-point iteration of m at fixed gamma (per-group offsets included), damped so that the free
        energy never rises (the step halves when it would)."""
        current = self.evaluate(np.clip(m, M_LOW, M_HIGH), gamma)
        eta, converged = 1.0, False
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007 (read after the loop)
            target = expit(gamma + 0.5 * current.beta * current.proj2 / (1.0 - current.m) ** 2)
            trial_m = np.clip((1.0 - eta) * current.m + eta * target, M_LOW, M_HIGH)
            trial = self.evaluate(trial_m, gamma)
            if trial.free_energy > current.free_energy + 1e-10 * abs(current.free_energy) and eta > 1e-6:
                eta *= 0.5
                continue
            step = np.max(np.abs(trial.m - current.m))
            current = trial
            if step < self.tol:
                converged = True
                break
        current.n_iter, current.converged = n_iter, converged
        return current

    def effective_size(self, sol: _Solution) -> float:
        return float(sol.m @ self.basis.sizes)

    def valid(self, sol: _Solution) -> bool:
        """A solution the forward sweep may continue from: fewer effective coefficients than rows, and (beta
        estimated) a noise precision below 1e3 n / y^T y (else the interpolating regime, F unbounded below)."""
        if self.effective_size(sol) >= self.n:
            return False
        return self.fixed_beta is not None or sol.beta < BETA_MAX_FACTOR * self.n / self.yy

    def gamma_min(self, offsets: np.ndarray) -> float:
        """A gamma at which every m_g <= 1e-4 (alpha ~ y when nothing is selected)."""
        beta0 = self.n / self.yy if self.fixed_beta is None else self.fixed_beta
        reach = offsets + 0.5 * beta0 * self.basis.group_sums(self.Uty * self.Uty)
        return float(logit(GAMMA_MIN_EPS) - reach.max())

    def path(self, grid: np.ndarray, offsets: np.ndarray, lowest: int = 0) -> tuple[list, int]:
        """Forward sweep up the grid, backward sweep down to index ``lowest``; the lower-F solution per grid
        point (None where the forward sweep never got). Returns (solutions, total inner iterations)."""
        G = offsets.shape[0]
        m = np.full(G, START_M)
        forward: list = [None] * grid.size
        iterations = 0
        for i, gamma in enumerate(grid):
            sol = self.solve(m, gamma + offsets)
            iterations += sol.n_iter
            if not self.valid(sol):
                break  # discard it; the backward sweep starts from the last valid solution
            forward[i], m = sol, sol.m
        best = list(forward)
        last = max((i for i, s in enumerate(forward) if s is not None), default=-1)
        for i in range(last - 1, lowest - 1, -1):
            sol = self.solve(m, grid[i] + offsets)
            iterations += sol.n_iter
            m = sol.m
            if best[i] is None or sol.free_energy < best[i].free_energy:
                best[i] = sol
        return best, iterations


def _condition_number(X: np.ndarray) -> float:
    """The ratio of X's largest to its smallest singular value (of min(n, d)); O(min(n, d)^2 max(n, d))."""
    singular = np.linalg.svd(X, compute_uv=False)
    return float(singular[0] / singular[-1]) if singular[-1] > 0 else np.inf


class VariationalGarrote(GroupRegressor):
    """The variational garrote with group selectors (Kappen & Gomez 2014; grouped variant).

    Parameters
    ----------
    groups : array-like, shape (d,)
        Group label of every coefficient.
    p0 : float or array-like of shape (G,)
        Prior probability of a group, for ``gamma_selection="matched"``: gamma = logit(p0) (per group when a
        vector is given).
    v0 : float
        Slab variance of the spike-and-slab prior the gamma is matched to (the Occam offsets).
    noise_var : float or None
        Noise variance (beta = 1/noise_var fixed), or None to estimate beta by MAP (the paper; overfits
        when n < d).
    gamma_selection : {"matched", "cv"} or float
        "matched": gamma = logit(p0) with per-group offsets ``-1/2 log det(I + (v0/s2) X_g^T X_g)`` (the cost of a
        slab that VG's flat prior does not pay); "cv": the grid value with the smallest K-fold held-out mean
        squared error; a float: that gamma, no offsets.
    n_gamma : int
        Grid points for "cv" and for a given gamma (the matched grid has 27).
    cv : int
        Folds for "cv".
    tol : float
        The inner iteration stops when no m_g changes by more than this.
    max_iter : int
        Inner iterations per gamma.
    form : {"auto", "dual", "primal"}
        Solve the v-equation with an n x n ("dual") or a d x d ("primal") Cholesky factor; "auto": dual iff n < d.
    random_state : int or None
        Folds of "cv".

    Attributes
    ----------
    coef_ : ndarray, shape (d,)
        ``v``, the estimate of the signal (selector probability times weight).
    group_prob_ : ndarray, shape (G,)
        The variational selection probabilities m_g, in sorted label order (``group_labels_``).
    group_labels_ : ndarray, shape (G,)
    gamma_ : float
        The gamma of the solution reported (below the target when the path stopped before it).
    noise_var_ : float
        1 / beta (estimated or given).
    free_energy_ : float
    gammas_, path_free_energy_ : ndarray, shape (n_grid,)
        The gamma grid and the lower free energy found at each point (NaN where the path did not get).
    cv_mse_ : ndarray, shape (n_grid,) or None
        Mean held-out squared error per grid point ("cv").
    n_iter_ : int
        Inner iterations over the whole path (and the folds).
    condition_number_ : float
        X's largest over its smallest singular value. Above :data:`ILL_CONDITIONED` a warning says that the
        estimate may be far from the truth although the path converged: VG's flat prior within a selected group
        leaves directions the rows barely resolve unpenalised (simulated, d = 40 in 10 groups of 4: mean error
        2.4 at n = 20 and 1.2 at n = 60 for condition 1e3, against 0.74 and 0.15 for GSS-EP on the same data).
    converged_ : bool
        Whether the path reached the gamma asked for (it stops when the selection would have as many effective
        coefficients as there are rows; the last valid solution is then reported, at a smaller ``gamma_``) and
        every inner iteration leading to the reported solution met ``tol``.

    Notes
    -----
    No intercept: the model is ``y = X v + noise``, as in compressed sensing; centre y and X yourself if your
    data have an offset. VG has no posterior covariance over w (w is a point estimate), so in sequential
    design it runs with random rows only. Every fit runs the whole path: continuing from the last fit's m after
    one more row was tried and ends in a different local minimum with a higher free energy (an E4 image:
    F 764 against 757 from the path), so there is no warm start.

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.models import VariationalGarrote
    >>> rng = np.random.default_rng(0)
    >>> groups = np.repeat(np.arange(10), 3)
    >>> w = np.where(groups < 2, 1.0, 0.0)
    >>> X = rng.normal(size=(20, 30))
    >>> vg = VariationalGarrote(groups, p0=0.2, v0=1.0, noise_var=0.01).fit(X, X @ w + rng.normal(0, 0.1, 20))
    >>> np.flatnonzero(vg.group_prob_ > 0.5)
    array([0, 1])

    Examples
    --------
    >>> from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    >>> p = make_e1_problem(experiment_rng("E1", 0, 0))  # 512 coefficients in 128 groups of 4, 64 rows
    >>> from adaptcs.models import VariationalGarrote
    >>> est = VariationalGarrote(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0).fit(p.X, p.y)
    >>> est.coef_.shape, est.group_prob_.shape
    ((512,), (128,))
    """

    _parameter_constraints = {"groups": constraints.GROUPS, "p0": constraints.PROBABILITY, "v0": constraints.POSITIVE,
                              "noise_var": constraints.POSITIVE_OR_NONE,
                              "gamma_selection": [StrOptions(set(GAMMA_SELECTIONS)), Real],
                              "n_gamma": constraints.FOLDS, "cv": constraints.FOLDS, "tol": constraints.POSITIVE,
                              "max_iter": constraints.COUNT,
                              "form": [StrOptions(set(FORMS))], "random_state": ["random_state"]}

    def __init__(self, groups=None, *, p0=0.5, v0=1.0, noise_var=1.0, gamma_selection="matched", n_gamma=30, cv=5,
                 tol=1e-6, max_iter=2000, form="auto", random_state=None):
        self.groups = groups
        self.p0 = p0
        self.v0 = v0
        self.noise_var = noise_var
        self.gamma_selection = gamma_selection
        self.n_gamma = n_gamma
        self.cv = cv
        self.tol = tol
        self.max_iter = max_iter
        self.form = form
        self.random_state = random_state

    def _check_extra(self, n_groups: int | None = None) -> None:
        """A finite gamma; a seed; one ``p0`` per group (or one for all), each inside (0, 1)."""
        selection = self.gamma_selection
        if not (isinstance(selection, str) and selection in GAMMA_SELECTIONS):
            if isinstance(selection, bool) or not isinstance(selection, (int, float)) or not np.isfinite(selection):
                raise ValueError(f"gamma_selection must be one of {GAMMA_SELECTIONS} or a finite number; "
                                 f"got {selection!r}")
        val.check_random_state(self.random_state)
        val.check_probability(self.p0, n_groups, "p0")

    def _fit(self, X, y, labels, coef_group):
        """Follow the gamma path on (X, y) and keep the solution at the selected gamma."""
        val.check_squares_fit(self, X, y)  # VG works in the data's own units
        G = labels.shape[0]
        p0 = val.check_probability(self.p0, G, "p0")  # one per group
        noise_var = None if self.noise_var is None else float(self.noise_var)
        beta = None if noise_var is None else 1.0 / noise_var
        problem = self._problem(X, y, coef_group, G, beta)
        selection = self.gamma_selection
        cv_mse = None
        if selection == "matched":
            s2 = noise_var if beta is not None else float(np.mean(y * y))  # a scale when beta is free
            log_odds = logit(p0)
            target = float(np.mean(log_odds))
            offsets = (log_odds - target) + problem.basis.occam_offsets(float(self.v0) / s2)
            start = problem.gamma_min(offsets)
            below, above, span = MATCHED_GRID
            grid = np.concatenate([np.linspace(min(start, target - 1.0), target, below),
                                   target + np.linspace(0.0, span, above + 1)[1:]])
            report = below - 1
        else:
            offsets = np.zeros(G)
            start = problem.gamma_min(offsets)
            if selection == "cv":
                grid = np.linspace(start, max(0.0, start + 1.0), int(self.n_gamma))
            else:
                grid = np.linspace(min(start, float(selection) - 1.0), float(selection), int(self.n_gamma))
            report = grid.size - 1
        iterations = 0
        if selection == "cv":
            cv_mse, iterations = self._cross_validate(X, y, coef_group, G, beta, grid, offsets)
            report = int(np.argmin(cv_mse))
        solutions, path_iterations = problem.path(grid, offsets, lowest=0 if selection == "cv" else report)
        iterations += path_iterations
        reached = [i for i in range(report + 1) if solutions[i] is not None]
        if not reached:  # the first grid point already selects as much as there are rows
            raise ValueError("the variational garrote selects at least as many effective coefficients as there "
                             "are rows at every gamma of the path: too few rows for this problem")
        chosen = reached[-1]
        sol = solutions[chosen]
        self.n_features_in_ = X.shape[1]
        self.group_labels_ = labels
        self.coef_ = problem.basis.coefficients(sol.xi)
        self.group_prob_ = sol.m.copy()
        self.gamma_ = float(grid[chosen])
        self.noise_var_ = 1.0 / sol.beta
        self.free_energy_ = sol.free_energy
        self.gammas_ = grid
        self.path_free_energy_ = np.array([np.nan if s is None else s.free_energy for s in solutions])
        self.cv_mse_ = cv_mse
        self.n_iter_ = iterations
        self.condition_number_ = _condition_number(X)
        if self.condition_number_ > ILL_CONDITIONED:
            warnings.warn(f"{type(self).__name__}: X has condition number {self.condition_number_:.2g}: the rows "
                          "barely tell some coefficient vectors apart, and VG's flat prior within a selected group "
                          "leaves those directions unpenalised, so its estimate can be far from the truth even when "
                          "converged (docs/model.md, 'VG on ill-conditioned rows')", UserWarning, stacklevel=5)
        # a path stopped before the gamma asked for reports its last valid solution, which is not an answer at
        # that gamma: counted as not converged, like an inner iteration that did not meet tol
        self.converged_ = (chosen == report and sol.converged
                           and all(s.converged for s in solutions[chosen:] if s is not None))
        return self

    def _problem(self, X, y, coef_group, G, beta) -> _VGProblem:
        return _VGProblem(X, y, coef_group, G, beta, self.form, float(self.tol), int(self.max_iter))

    def _cross_validate(self, X, y, coef_group, G, beta, grid, offsets) -> tuple[np.ndarray, int]:
        """Mean held-out squared error per grid point over K folds (+inf where a fold's path did not get)."""
        n = X.shape[0]
        rng = np.random.default_rng(self.random_state)
        folds = np.array_split(rng.permutation(n), int(self.cv))
        mse = np.zeros(grid.size)
        iterations = 0
        for test in folds:
            train = np.setdiff1d(np.arange(n), test)
            fold = self._problem(X[train], y[train], coef_group, G, beta)
            solutions, its = fold.path(grid, offsets)
            iterations += its
            for i, sol in enumerate(solutions):
                if sol is None:
                    mse[i] = np.inf
                else:
                    residual = y[test] - X[test] @ fold.basis.coefficients(sol.xi)
                    mse[i] += float(residual @ residual) / test.size / len(folds)
        return mse, iterations

    def predict(self, X):
        """``X coef_``, shape (k,)."""
        check_is_fitted(self, "coef_")
        return val.check_predict_rows(self, X) @ self.coef_


class UngroupedVariationalGarrote(VariationalGarrote):
    """The variational garrote with one selector per coefficient (the paper's original form).

    Parameters
    ----------
    p0 : float or array-like of shape (d,)
        Prior probability that a coefficient is selected.
    v0 : float
        Slab variance the selectors' Occam offsets are matched to, in signal units squared.
    noise_var : float
        Variance of the measurement noise.
    **options
        Every keyword option of :class:`VariationalGarrote` (``gamma_selection``, ``n_gamma``, ``cv``, ...).

    Attributes
    ----------
    Those of :class:`VariationalGarrote`; ``group_prob_`` (shape (d,)) holds each coefficient's selection
    probability.

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.models import UngroupedVariationalGarrote
    >>> rng = np.random.default_rng(1)
    >>> X = rng.normal(size=(30, 20))
    >>> w = np.r_[2.0, -2.0, np.zeros(18)]
    >>> vg = UngroupedVariationalGarrote(p0=0.1, v0=4.0, noise_var=0.01).fit(X, X @ w)
    >>> np.flatnonzero(vg.group_prob_ > 0.5)
    array([0, 1])

    Examples
    --------
    >>> from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    >>> p = make_e1_problem(experiment_rng("E1", 0, 0))  # 512 coefficients in 128 groups of 4, 64 rows
    >>> from adaptcs.models import UngroupedVariationalGarrote
    >>> est = UngroupedVariationalGarrote(p0=16 / 512, v0=1 / 3, noise_var=1.0).fit(p.X, p.y)
    >>> est.coef_.shape
    (512,)
    """

    _parameter_constraints = constraints.without_groups(VariationalGarrote._parameter_constraints)

    def __init__(self, *, p0=0.5, v0=1.0, noise_var=1.0, gamma_selection="matched", n_gamma=30, cv=5, tol=1e-6,
                 max_iter=2000, form="auto", random_state=None):
        super().__init__(None, p0=p0, v0=v0, noise_var=noise_var, gamma_selection=gamma_selection, n_gamma=n_gamma,
                         cv=cv, tol=tol, max_iter=max_iter, form=form, random_state=random_state)

    def _resolve_groups(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        index = np.arange(d, dtype=np.intp)
        return index, index
