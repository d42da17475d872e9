"""Group lasso (G-LASSO): a point estimate, in the penalised or the paper's constrained form.

Penalised:    min_w 1/2 ||y - X w||^2 + alpha sum_g sqrt(d_g) ||w_g||_2
Constrained:  min_w 1/2 ||y - X w||^2  subject to  sum_g sqrt(d_g) ||w_g||_2 <= k

The penalised problem is solved by skglm's group block coordinate descent (compiled with numba on first
use in a process, 10-20 s), checked afterwards by the duality gap. The constrained form is the penalised
solution at the alpha where the penalty equals k, found along a decreasing alpha path with warm starts and
then by regula falsi (Illinois) on log alpha. No posterior: in design experiments it takes random rows only.
"""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from adaptcs import _validation as val
from adaptcs.models import _constraints as constraints
from adaptcs.models._base import GroupRegressor
from adaptcs.models._scaling import DataScale

COARSE_TOL = 1e-6  # duality-gap tolerance (relative to ||y||^2 / 2) while bracketing alpha
# Smallest alpha / alpha_max tried: below it, solves near interpolation get very slow, and when the constraint
# cannot bind the answer is the small-alpha limit anyway (its penalty is then within about 1e-4 of the limit).
MIN_ALPHA_RATIO = 1e-4
# When the bracket on alpha has collapsed to rounding, the constraint counts as met within this relative error.
BRACKET_K_TOL = 1e-4
N_CV_ALPHAS = 20  # penalties on the path scored by cross-validation (k="cv")


def group_penalty(w: np.ndarray, members: list[np.ndarray]) -> float:
    """``sum_g sqrt(d_g) ||w_g||_2``."""
    return float(sum(np.sqrt(len(m)) * np.linalg.norm(w[m]) for m in members))


def duality_gap(X, y, w, alpha: float, members: list[np.ndarray]) -> tuple[float, float]:
    """Primal value and duality gap of the penalised problem at ``w``.

    The dual point is the residual scaled into the dual feasible set ``||X_g^T theta|| <= alpha sqrt(d_g)``.
    """
    r = y - X @ w
    primal = 0.5 * float(r @ r) + alpha * group_penalty(w, members)
    Xtr = X.T @ r
    ratios = [np.linalg.norm(Xtr[m]) / (alpha * np.sqrt(len(m))) for m in members]
    theta = r / max(1.0, max(ratios))
    dual = 0.5 * float(y @ y) - 0.5 * float((y - theta) @ (y - theta))
    return primal, primal - dual


class GroupLasso(GroupRegressor):
    """Group lasso with weights sqrt(d_g), penalised (``alpha``) or constrained (``k``); give at most one (with
    neither, the penalty is chosen by cross-validation, as with ``k="cv"``).

    Parameters
    ----------
    groups : array-like, shape (d,)
        Group label of each coefficient.
    alpha : float, optional
        Penalty strength of the penalised form (in the units of 1/2 ||y - X w||^2, not divided by n).
    k : float or "cv", optional
        Bound of the constrained form, ``sum_g sqrt(d_g) ||w_g|| <= k`` (the paper uses k = 8 in E1); ``"cv"``
        chooses the penalty by K-fold cross-validation of the held-out squared error over a path of
        ``N_CV_ALPHAS`` penalties from ``alpha_max`` down to ``alpha_max / 1000`` (``k`` is then ``penalty_``).
    tol : float
        Duality-gap target of each penalised solve, relative to the objective at w = 0 (``||y||^2 / 2``).
    k_tol : float
        Relative accuracy of the constraint, ``|penalty - k| <= k_tol * k`` (constrained form).
    max_iter : int
        Cap on penalised solves in the search for alpha (constrained form).
    warm_start : bool
        Start the solver from the previous solution. In the constrained form on the very same (X, y) with a k
        at least the previous penalty (a path of growing k), the search for alpha also starts from the previous
        alpha; otherwise it starts afresh from ``alpha_max``.
    cv : int
        Number of folds for ``k="cv"``.
    cv_every : int
        With ``warm_start`` and ``k="cv"`` (sequential design), the penalty is cross-validated at the first fit
        and then at every ``cv_every``-th refit; the refits in between keep the last choice as a fraction of
        ``alpha_max`` (cross-validating every refit costs seconds per row).

    Attributes
    ----------
    coef_ : ndarray, shape (d,)
    alpha_ : float
        The penalty strength of the returned solution.
    penalty_ : float
        ``sum_g sqrt(d_g) ||w_g||`` at the solution.
    duality_gap_ : float
        Duality gap of the penalised problem at ``alpha_``.
    n_iter_ : int
        Penalised solves done.
    converged_ : bool

    Examples
    --------
    >>> from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    >>> from adaptcs.metrics import relative_error
    >>> p = make_e1_problem(experiment_rng("E1", 0, 0))  # 512 coefficients in 128 groups of 4, 64 rows
    >>> from adaptcs.models import GroupLasso
    >>> est = GroupLasso(p.groups, k=8.0).fit(p.X, p.y)  # the paper's constrained form
    >>> round(est.penalty_, 4)
    8.0
    >>> relative_error(est.coef_, p.w_true) < 0.8
    True
    """

    _parameter_constraints = {"groups": constraints.GROUPS, "alpha": constraints.POSITIVE_OR_NONE,
                              "k": [*constraints.POSITIVE, StrOptions({"cv"}), None], "tol": constraints.POSITIVE,
                              "k_tol": constraints.POSITIVE, "max_iter": constraints.COUNT,
                              "warm_start": constraints.BOOLEAN, "cv": constraints.FOLDS,
                              "cv_every": constraints.COUNT}

    def __init__(self, groups=None, *, alpha=None, k=None, tol=1e-8, k_tol=1e-7, max_iter=100, warm_start=False,
                 cv=5, cv_every=8):
        self.groups = groups
        self.alpha = alpha
        self.k = k
        self.tol = tol
        self.k_tol = k_tol
        self.max_iter = max_iter
        self.warm_start = warm_start
        self.cv = cv
        self.cv_every = cv_every

    def _check_extra(self, n_groups: int | None = None) -> None:
        """The penalised and the constrained form exclude each other."""
        if self.alpha is not None and self.k is not None:
            raise ValueError("give at most one of alpha (penalised form) and k (constrained form)")

    def _fit(self, X, y, labels, coef_group):
        """Solve the penalised or constrained problem."""
        n, d = X.shape
        tol, max_iter = float(self.tol), int(self.max_iter)
        _order, members = val.group_members(coef_group, labels.shape[0])
        weights = np.sqrt([len(m) for m in members])
        # Solve on data of unit size (exact power-of-two rescaling): with w = unit w_s, the objective is y^2 times
        # that of (X_s, y_s) with alpha_s = alpha / (x y), and penalty(w) <= k is penalty(w_s) <= k x / y.
        scale = DataScale.of(X, y)
        unit = scale.coef
        Xs, ys = X / scale.x, y / scale.y
        solver = _PenalisedSolver(Xs, ys, members, weights, tol)
        warm = self.warm_start and hasattr(self, "coef_") and self.coef_.shape[0] == d
        if warm:
            solver.set_start(self.coef_ / unit)

        gap_tol = tol
        if self.k == "cv" or (self.k is None and self.alpha is None):
            state = getattr(self, "_cv_state", None) if warm else None  # None also after a fit with another k
            refits = state["refits"] + 1 if state else 0
            ratio = state["ratio"] if state else None
            alpha_max = solver.alpha_max()
            if ratio is None or refits % self.cv_every == 0 or alpha_max == 0.0:
                alpha_s = _cross_validated_alpha(Xs, ys, members, weights, tol, int(self.cv))
                ratio = alpha_s / alpha_max if alpha_max > 0.0 else None
            else:
                alpha_s = ratio * alpha_max
            self._cv_state = {"refits": refits, "ratio": ratio}
            w = solver.solve(alpha_s)
            converged = True
        elif self.alpha is not None:
            alpha_s = _in_range(float(self.alpha) / (scale.x * scale.y), "alpha", scale)
            w = solver.solve(alpha_s)
            converged = True
        else:
            k_s = _in_range(float(self.k) / unit, "k", scale)
            fingerprint = _data_fingerprint(X, y)
            path = getattr(self, "_k_path", None) if warm else None
            start = path["start"] if path and path["data"] == fingerprint and path["start"][1] <= k_s else None
            alpha_s, w, converged, gap_tol = self._search_alpha(solver, k_s, float(self.k_tol), max_iter, start)
            self._k_path = {"data": fingerprint, "start": (alpha_s, group_penalty(w, members))}

        _primal, gap_s = duality_gap(Xs, ys, w, alpha_s, members)
        if not gap_s <= gap_tol * solver.scale:
            converged = False
        w = w * unit
        gap = gap_s * scale.y * scale.y  # inf, not an OverflowError, when y's units square beyond 1e308
        if not converged:
            warnings.warn(f"GroupLasso: not converged (duality gap {gap:.2e}, penalty "
                          f"{group_penalty(w, members):.6g})", ConvergenceWarning, stacklevel=5)
        self.n_features_in_ = d
        self.group_labels_ = labels
        self.coef_ = w
        self.alpha_ = alpha_s * scale.x * scale.y
        self.penalty_ = group_penalty(w, members)
        self.duality_gap_ = gap
        self.n_iter_ = solver.n_solves
        self.converged_ = converged
        return self

    @staticmethod
    def _search_alpha(solver, k, tol, max_iter, start=None):
        """alpha with penalty(w(alpha)) = k: geometric descent from alpha_max (or from ``start``, an
        ``(alpha, penalty)`` on the same data with penalty <= k: a path of growing k), then Illinois on log alpha.

        Returns (alpha, w, converged, gap_tol): bracketing solves and the answer when the constraint does
        not bind use the looser gap tolerance ``COARSE_TOL`` (near-interpolating solves are slow, and there
        the answer is itself the small-alpha limit); the final solves of a binding constraint use the full one.
        """
        coarse = max(solver.tol, COARSE_TOL)
        alpha_max = solver.alpha_max()
        if alpha_max == 0.0:  # y is orthogonal to every group: w = 0 for every alpha
            return 1.0, solver.solve(1.0), True, solver.tol
        # Bracket: hi has penalty <= k, lo has penalty >= k. The penalty grows as alpha falls; when n < d it
        # levels off at the least-penalty interpolant's, and if that is below k the constraint never binds.
        hi, p_hi = (alpha_max, 0.0) if start is None else start
        alpha = hi / 2
        lo = p_lo = None
        while solver.n_solves < max_iter:
            w = solver.solve(alpha, coarse)
            p = group_penalty(w, solver.members)
            if p >= k:
                lo, p_lo = alpha, p
                break
            levelled = p - p_hi <= 1e-4 * p and hi < alpha_max
            hi, p_hi = alpha, p
            if levelled or alpha < alpha_max * MIN_ALPHA_RATIO:
                return alpha, w, True, coarse  # the constraint does not bind: the (near) least-penalty fit
            alpha /= 4
        if lo is None:
            return hi, solver.solve(hi, coarse), False, coarse
        if abs(p_lo - k) <= tol * k:  # the bracket's end is the answer: solve it to the full tolerance
            w = solver.solve(lo)
            if abs(group_penalty(w, solver.members) - k) <= tol * k:
                return lo, w, True, solver.tol
        # Illinois regula falsi on f(log alpha) = penalty - k, f(lo) >= 0 >= f(hi).
        a, fa, b, fb = np.log(lo), p_lo - k, np.log(hi), p_hi - k
        side = 0
        while solver.n_solves < max_iter:
            c = (a * fb - b * fa) / (fb - fa)
            w = solver.solve(float(np.exp(c)))
            fc = group_penalty(w, solver.members) - k
            if abs(fc) <= tol * k:
                return float(np.exp(c)), w, True, solver.tol
            if abs(b - a) <= 1e-12 * max(1.0, abs(c)):
                # alpha is fixed to rounding; what is left of |penalty - k| is the solver's own accuracy
                return float(np.exp(c)), w, abs(fc) <= BRACKET_K_TOL * k, solver.tol
            if fc > 0:
                a, fa = c, fc
                if side == -1:
                    fb /= 2
                side = -1
            else:
                b, fb = c, fc
                if side == 1:
                    fa /= 2
                side = 1
        return float(np.exp(c)), w, False, solver.tol

    def predict(self, X):
        """``X @ coef_`` for rows X of shape (k, d)."""
        check_is_fitted(self, "coef_")
        return val.check_predict_rows(self, X) @ self.coef_


def _cross_validated_alpha(X, y, members, weights, tol: float, n_folds: int, seed: int = 0) -> float:
    """The penalty of the path (``alpha_max`` down to ``alpha_max / 1000``, log-spaced) with the smallest K-fold
    held-out squared error; each fold's path is solved with warm starts."""
    from sklearn.model_selection import KFold

    if X.shape[0] < n_folds:
        raise ValueError(f"GroupLasso: k='cv' with cv={n_folds} folds needs at least {n_folds} rows; got "
                         f"n_samples = {X.shape[0]}")
    alpha_max = _PenalisedSolver(X, y, members, weights, tol).alpha_max()
    if alpha_max == 0.0:
        return 1.0  # y is orthogonal to every group: w = 0 for every alpha
    alphas = alpha_max * np.logspace(0.0, -3.0, N_CV_ALPHAS + 1)[1:]
    errors = np.zeros(N_CV_ALPHAS)
    for train, test in KFold(n_folds, shuffle=True, random_state=seed).split(X):
        solver = _PenalisedSolver(X[train], y[train], members, weights, tol)
        for i, alpha in enumerate(alphas):
            resid = y[test] - X[test] @ solver.solve(alpha, max(tol, COARSE_TOL))
            errors[i] += float(resid @ resid)
    return float(alphas[int(np.argmin(errors))])


def _data_fingerprint(X: np.ndarray, y: np.ndarray) -> str:
    """A digest of (X, y): a warm-started fit continues a path of k only on the very same data."""
    digest = hashlib.blake2b(digest_size=16)
    for array in (X, y):
        digest.update(repr(array.shape).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _in_range(value: float, name: str, scale: DataScale) -> float:
    """A penalty parameter in the units of the rescaled data; ``ValueError`` if it leaves the float range."""
    if not (np.isfinite(value) and value > 0.0):
        raise ValueError(f"GroupLasso: {name} is out of floating-point range relative to the data (X of size "
                         f"{scale.x:g}, y of size {scale.y:g}): rescale X, y or {name}")
    return float(value)


class _PenalisedSolver:
    """skglm's GroupLasso on our objective (skglm divides the squared loss by n), with warm starts."""

    def __init__(self, X, y, members, weights, tol):
        from skglm import GroupLasso as SkglmGroupLasso  # deferred: importing skglm loads numba

        self.X, self.y, self.members, self.weights, self.tol = X, y, members, weights, tol
        self.n_solves = 0
        self._inner_ratio = 1.0
        self.scale = 0.5 * float(y @ y)  # the objective at w = 0: gaps are relative to it
        self._est = SkglmGroupLasso(groups=[m.tolist() for m in members], weights=weights, fit_intercept=False,
                                    warm_start=True, tol=tol, max_iter=1000, max_epochs=100_000)

    def set_start(self, w):
        self._est.coef_ = np.asarray(w, dtype=float).copy()

    def alpha_max(self) -> float:
        Xty = self.X.T @ self.y
        return max(float(np.linalg.norm(Xty[m]) / c) for m, c in zip(self.members, self.weights, strict=True))

    def solve(self, alpha: float, tol: float | None = None) -> np.ndarray:
        """Solve at ``alpha``, tightening skglm's own (KKT-violation) tolerance until the duality gap is
        below ``tol * ||y||^2 / 2`` (``tol`` defaults to the solver's)."""
        n = self.X.shape[0]
        tol = self.tol if tol is None else tol
        # skglm's tolerance that met the gap on the last solve is where this one starts (a path's solves are alike)
        inner_tol = tol * self._inner_ratio
        for _ in range(4):
            self._est.set_params(alpha=alpha / n, tol=inner_tol)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # judged by the duality gap instead
                self._est.fit(self.X, self.y)
            _primal, gap = duality_gap(self.X, self.y, self._est.coef_, alpha, self.members)
            if gap <= tol * self.scale:
                self._inner_ratio = inner_tol / tol
                break
            inner_tol /= 100
        self.n_solves += 1
        return self._est.coef_.copy()
