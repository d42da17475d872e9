"""FLAS: a MAP estimate and a Laplace approximation for group spike-and-slab models with a continuous spike
(Naqvi, Zhe, Qi, Yang, Ye, IJCAI 2016), grouped and ungrouped.

Model: ``y | w ~ N(X w, s2 I)``, ``w_g ~ p0 N(0, r1 I) + (1 - p0) N(0, r0 I)`` with slab variance ``r1 = v0``
and a narrow spike ``r0`` (default ``1e-3 v0``). With ``l_k(w_g) = log pi_k - (d_g/2) log(2 pi r_k) -
||w_g||^2 / (2 r_k)`` (pi_1 = p0, pi_0 = 1 - p0) the slab responsibility is ``rho_g = sig(l_1 - l_0)``.

- "lbfgs" (FLAS): minimise ``F(w) = ||y - X w||^2 / (2 s2) - sum_g logaddexp(l_1, l_0)`` (smooth) by L-BFGS;
- "gist" (FLAS*): minimise ``F*(w) = ||y - X w||^2 / (2 s2) + sum_g min_k -l_k(w_g)`` (each group in the spike
  or the slab) by proximal gradient with Barzilai-Borwein steps and a non-monotone line search (GIST).

Both start from a group-lasso path, stopped at the first penalty with twice the expected number of active
groups (from zero the spike's curvature traps the optimiser at w ~ 0). The Laplace approximation is
``N(w_hat, H^{-1})``, ``H = X^T X / s2 + B`` with B the block-diagonal negative Hessian of the log prior at
w_hat (``a_g I - c_g w_g w_g^T``; its eigenvalue along w_g floored at 1/r1 so that B is positive definite).
``H^{-1} = B^{-1} - A^T A`` with ``A = C^{-1} X B^{-1}`` and ``C C^T = s2 I + X B^{-1} X^T`` (n x n) gives
``cov_matvec`` in O(n d) and the marginal variances in O(n^2 d). Group probabilities are ``E[rho_g(w_g)]``
under the Laplace marginal of the group, by Gauss-Hermite quadrature.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy.linalg import cho_factor, solve_triangular
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from adaptcs import _validation as val
from adaptcs.models import _constraints as constraints
from adaptcs.models._base import GroupRegressor
from adaptcs.models._scaling import DataScale

METHODS = ("lbfgs", "gist")
INITS = ("group_lasso", "zeros")
R0_RATIO = 1e-3  # default spike variance r0 = 1e-3 v0 (Naqvi et al. use a spike much narrower than the slab)
PATH_LENGTH, PATH_RATIO = 30, 1e-2  # group-lasso start: 30 penalties from lambda_max down to 1e-2 lambda_max
PATH_ITER = 300
MAX_TENSOR_NODES = 4096  # above: the degree-3 spherical cubature instead of the Gauss-Hermite tensor grid


class _Groups:
    """Group-sorted bookkeeping: per-group sums of per-coefficient quantities."""

    def __init__(self, coef_group: np.ndarray, n_groups: int):
        self.index = coef_group
        self.sizes = np.bincount(coef_group, minlength=n_groups).astype(float)
        self.order = np.argsort(coef_group, kind="stable")
        self.starts = np.concatenate([[0], np.cumsum(self.sizes.astype(int))[:-1]])

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per-group sums of ``values`` (d,) or of the columns of ``values`` (n, d): (G,) or (n, G)."""
        if values.ndim == 1:
            return np.bincount(self.index, weights=values, minlength=self.sizes.size)
        return np.add.reduceat(values[:, self.order], self.starts, axis=1)


class _Prior:
    """The group spike-and-slab mixture prior and its derivatives."""

    def __init__(self, groups: _Groups, p0: np.ndarray, r1: float, r0: float):
        self.groups, self.r1, self.r0 = groups, r1, r0
        sizes = groups.sizes
        self.const1 = np.log(p0) - 0.5 * sizes * np.log(2 * np.pi * r1)
        self.const0 = np.log1p(-p0) - 0.5 * sizes * np.log(2 * np.pi * r0)

    def log_components(self, norm2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``l_1`` and ``l_0`` per group from ``||w_g||^2``."""
        return self.const1 - norm2 / (2 * self.r1), self.const0 - norm2 / (2 * self.r0)

    def responsibility(self, norm2: np.ndarray) -> np.ndarray:
        l1, l0 = self.log_components(norm2)
        return expit(l1 - l0)

    def curvature(self, rho: np.ndarray) -> np.ndarray:
        """``a_g = rho_g / r1 + (1 - rho_g) / r0``: the gradient of the penalty is ``a_g w_g``."""
        return rho / self.r1 + (1.0 - rho) / self.r0


def group_lasso_start(X, y, groups: _Groups, n_active: int, lipschitz: float) -> np.ndarray:
    """A rough group-lasso path (FISTA, warm-started) from lambda_max down, stopped at the first penalty with at
    least ``n_active`` active groups; its solution, shape (d,)."""
    n, d = X.shape
    weights = np.sqrt(groups.sizes)
    Xty = X.T @ y
    lam_max = float(np.max(np.sqrt(groups.sums(Xty * Xty)) / weights))
    w = np.zeros(d)
    step = 1.0 / lipschitz
    for lam in lam_max * np.geomspace(1.0, PATH_RATIO, PATH_LENGTH)[1:]:
        z, w_prev, t = w.copy(), w.copy(), 1.0
        threshold = step * lam * weights
        for _ in range(PATH_ITER):
            u = z - step * (X.T @ (X @ z) - Xty)
            norms = np.sqrt(groups.sums(u * u))
            shrink = np.maximum(0.0, 1.0 - threshold / np.maximum(norms, 1e-300))
            w = u * shrink[groups.index]
            t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            z = w + ((t - 1.0) / t_next) * (w - w_prev)
            if np.linalg.norm(w - w_prev) <= 1e-6 * max(1.0, np.linalg.norm(w)):
                break
            w_prev, t = w, t_next
        if np.count_nonzero(groups.sums(w * w)) >= n_active:
            break
    return w


class _Objective:
    """F (smooth, FLAS) and F* (hard assignment, FLAS*) with the data term ``||y - X w||^2 / (2 s2)``."""

    def __init__(self, X, y, noise_var: float, prior: _Prior):
        self.X, self.y, self.tau, self.prior = X, y, 1.0 / noise_var, prior

    def smooth(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        r = self.y - self.X @ w
        norm2 = self.prior.groups.sums(w * w)
        l1, l0 = self.prior.log_components(norm2)
        rho = expit(l1 - l0)
        a = self.prior.curvature(rho)[self.prior.groups.index]
        value = 0.5 * self.tau * float(r @ r) - float(np.sum(np.logaddexp(l1, l0)))
        return value, -self.tau * (self.X.T @ r) + a * w

    def hard(self, w: np.ndarray) -> float:
        r = self.y - self.X @ w
        l1, l0 = self.prior.log_components(self.prior.groups.sums(w * w))
        return 0.5 * self.tau * float(r @ r) - float(np.sum(np.maximum(l1, l0)))

    def prox(self, u: np.ndarray, t: float) -> np.ndarray:
        """argmin_w ||w - u||^2 / (2 t) + sum_g min_k -l_k(w_g), group by group in closed form."""
        p = self.prior
        norm2 = p.groups.sums(u * u)
        value1 = norm2 / (2 * (t + p.r1)) - p.const1
        value0 = norm2 / (2 * (t + p.r0)) - p.const0
        shrink = np.where(value1 <= value0, 1.0 / (1.0 + t / p.r1), 1.0 / (1.0 + t / p.r0))
        return u * shrink[p.groups.index]


def _lbfgs(objective: _Objective, w0: np.ndarray, tol: float, max_iter: int):
    res = minimize(objective.smooth, w0, jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter, "maxcor": 20, "gtol": tol, "ftol": 10 * np.finfo(float).eps})
    # L-BFGS-B also stops when the objective stops decreasing (ftol at machine precision), which is a minimum
    # to working precision; the iteration cap, line-search failures and a stop where it started are not converged
    converged = (res.success or "REL_REDUCTION_OF_F" in str(res.message)) and res.nit < max_iter \
        and not np.array_equal(res.x, w0)
    return res.x, float(res.fun), int(res.nit), bool(converged)


def _gist(objective: _Objective, w0: np.ndarray, lipschitz: float, tol: float, max_iter: int):
    """Proximal gradient with Barzilai-Borwein steps and a non-monotone (last 5 values) line search."""
    X, y, tau = objective.X, objective.y, objective.tau
    w = w0.copy()
    grad = -tau * (X.T @ (y - X @ w))
    history = [objective.hard(w)]
    inv_t = lipschitz
    converged = False
    for n_iter in range(1, max_iter + 1):  # noqa: B007 (read after the loop)
        while True:
            w_new = objective.prox(w - grad / inv_t, 1.0 / inv_t)
            value = objective.hard(w_new)
            dw = w_new - w
            stuck = inv_t > 1e12 * lipschitz  # the line search found no decrease: a step of zero, not a minimum
            if value <= max(history[-5:]) - 0.5e-5 * inv_t * float(dw @ dw) or stuck:
                break
            inv_t *= 2.0
        grad_new = -tau * (X.T @ (y - X @ w_new))
        dg = grad_new - grad
        step2 = float(dw @ dw)
        w, grad = w_new, grad_new
        history.append(value)
        if math.sqrt(step2) <= tol * max(1.0, float(np.linalg.norm(w))):
            converged = not stuck and not np.array_equal(w, w0)
            break
        inv_t = min(max(float(dw @ dg) / step2, 1e-6 * lipschitz), lipschitz) if step2 > 0 else lipschitz
    return w, history[-1], n_iter, converged


class _LaplaceCovariance:
    """``H^{-1}`` for ``H = X^T X / s2 + B`` with B block-diagonal, ``B_g = a_g I - c_g w_g w_g^T`` (c_g >= 0,
    positive definite): ``H^{-1} = B^{-1} - A^T A`` from an n x n Cholesky factor."""

    def __init__(self, X, noise_var: float, groups: _Groups, a: np.ndarray, c: np.ndarray, w: np.ndarray):
        self.groups, self.w = groups, w
        self.inv_a = 1.0 / a  # (G,)
        norm2 = groups.sums(w * w)
        self.h = c / (a * (a - c * norm2))  # B_g^{-1} = I / a_g + h_g w_g w_g^T (Sherman-Morrison)
        XBinv = self.apply_binv_rows(X)  # X B^{-1}, (n, d)
        K = XBinv @ X.T
        K[np.diag_indices_from(K)] += noise_var
        factor, _ = cho_factor(K, lower=True)
        self.A = solve_triangular(factor, XBinv, lower=True)  # (n, d)

    def apply_binv_rows(self, M: np.ndarray) -> np.ndarray:
        """``M B^{-1}`` for M of shape (k, d) (B symmetric)."""
        idx = self.groups.index
        Mw = self.groups.sums(M * self.w)  # (k, G): M_g w_g
        return M * self.inv_a[idx] + (Mw * self.h)[:, idx] * self.w

    def matvec(self, V: np.ndarray) -> np.ndarray:
        """``H^{-1} V`` for V of shape (d,) or (d, k)."""
        block = V.reshape(V.shape[0], -1)
        out = self.apply_binv_rows(block.T).T - self.A.T @ (self.A @ block)
        return out.reshape(V.shape)

    def diagonal(self) -> np.ndarray:
        idx = self.groups.index
        return self.inv_a[idx] + self.h[idx] * self.w ** 2 - np.sum(self.A * self.A, axis=0)

    def group_blocks(self, members: np.ndarray) -> np.ndarray:
        """The covariance blocks of groups with the coefficient indices ``members`` (k, s): (k, s, s)."""
        g = self.groups.index[members[:, 0]]
        wg = self.w[members]
        Ag = self.A[:, members].transpose(1, 0, 2)  # (k, n, s)
        eye = np.eye(members.shape[1])
        return (self.inv_a[g][:, None, None] * eye + self.h[g][:, None, None] * wg[:, :, None] * wg[:, None, :]
                - np.matmul(Ag.transpose(0, 2, 1), Ag))


def _quadrature_nodes(size: int, n_gh: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard-normal nodes (N, size) and weights (N,): the Gauss-Hermite tensor grid, or the degree-3 spherical
    cubature (2 size nodes) when the grid would exceed MAX_TENSOR_NODES."""
    if n_gh ** size <= MAX_TENSOR_NODES:
        x, wts = np.polynomial.hermite_e.hermegauss(n_gh)
        wts = wts / math.sqrt(2 * math.pi)
        nodes = np.array(list(itertools.product(x, repeat=size)))
        weights = np.prod(np.array(list(itertools.product(wts, repeat=size))), axis=1)
        return nodes, weights
    eye = np.sqrt(size) * np.eye(size)
    return np.vstack([eye, -eye]), np.full(2 * size, 1.0 / (2 * size))


class FLAS(GroupRegressor):
    """FLAS: MAP and Laplace approximation for the group spike-and-slab prior with a continuous spike.

    Parameters
    ----------
    groups : array-like, shape (d,)
        Group label of every coefficient.
    p0 : float or array-like of shape (G,)
        Prior probability of the slab for each group.
    v0 : float
        Slab variance r1.
    noise_var : float
        Noise variance s2.
    r0 : float or None
        Spike variance (default ``1e-3 v0``).
    method : {"lbfgs", "gist"}
        "lbfgs": the marginal (smooth) objective by L-BFGS (FLAS); "gist": the hard-assignment objective by
        proximal gradient (FLAS*), whose Laplace step uses ``B_g = I / r_k`` of the chosen component.
    init : {"group_lasso", "zeros"}
        Start of the MAP optimiser (the group-lasso path is what works when n < d).
    init_group_factor : float
        The group-lasso path stops at ``ceil(init_group_factor * mean(p0) * G)`` active groups.
    n_gh : int
        Gauss-Hermite nodes per axis for the group probabilities.
    hessian_floor : bool
        Floor the prior curvature along w_g at 1/r1 (keeps B positive definite between spike and slab).
    tol : float
        Gradient tolerance (L-BFGS) or relative step tolerance (GIST).
    max_iter : int
    warm_start : bool
        The next fit also starts from this fit's MAP estimate and keeps the better of the two minima
        (sequential design).

    Attributes
    ----------
    coef_ : ndarray, shape (d,)
        The MAP estimate w_hat.
    coef_var_ : ndarray, shape (d,)
        Laplace marginal variances, ``diag(H^{-1})``.
    group_prob_ : ndarray, shape (G,)
        ``E[rho_g(w_g)]`` under the Laplace marginal of each group, in sorted label order (``group_labels_``).
    group_labels_ : ndarray, shape (G,)
    objective_ : float
        F (or F*) at the estimate.
    n_iter_ : int
        Iterations of the MAP optimiser.
    converged_ : bool
        Whether the optimiser met its tolerance; False when it stopped on its iteration count, in a failed line
        search or where it started.
    p0_, v0_, noise_var_ : float
        The hyper-parameters used (p0_ averaged over groups when given per group).

    Notes
    -----
    No intercept (``y = X w + noise``); centre the data yourself if they have an offset. Both objectives are
    non-convex: the optimisers find a local minimum near their start. With 20 instead of 24 rows in the
    example below, L-BFGS ends in a dense local minimum that GIST avoids; on E1 the two agree on average
    (0.447 both, 30 signals) and starting L-BFGS also from GIST's solution does not help there.

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.models import FLAS
    >>> rng = np.random.default_rng(0)
    >>> groups = np.repeat(np.arange(10), 3)
    >>> w = np.where(groups < 2, 1.0, 0.0)
    >>> X = rng.normal(size=(24, 30))
    >>> flas = FLAS(groups, p0=0.2, v0=1.0, noise_var=0.01).fit(X, X @ w + rng.normal(0, 0.1, 24))
    >>> np.flatnonzero(flas.group_prob_ > 0.5)
    array([0, 1])
    >>> mean, std = flas.predict(X[:2], return_std=True)

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    >>> p = make_e1_problem(experiment_rng("E1", 0, 0))  # 512 coefficients in 128 groups of 4, 64 rows
    >>> from adaptcs.models import FLAS
    >>> est = FLAS(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0).fit(p.X, p.y)
    >>> est.coef_.shape, est.cov_matvec(np.ones(512)).shape  # MAP estimate, Laplace covariance
    ((512,), (512,))
    """

    _parameter_constraints = {"groups": constraints.GROUPS, "p0": constraints.PROBABILITY, "v0": constraints.POSITIVE,
                              "noise_var": constraints.POSITIVE, "r0": constraints.POSITIVE_OR_NONE,
                              "method": [StrOptions(set(METHODS))], "init": [StrOptions(set(INITS))],
                              "init_group_factor": constraints.POSITIVE, "n_gh": constraints.COUNT,
                              "hessian_floor": constraints.BOOLEAN, "tol": constraints.POSITIVE,
                              "max_iter": constraints.COUNT, "warm_start": constraints.BOOLEAN}

    def __init__(self, groups=None, *, p0=0.5, v0=1.0, noise_var=1.0, r0=None, method="lbfgs", init="group_lasso",
                 init_group_factor=2.0, n_gh=5, hessian_floor=True, tol=1e-8, max_iter=5000, warm_start=False):
        self.groups = groups
        self.p0 = p0
        self.v0 = v0
        self.noise_var = noise_var
        self.r0 = r0
        self.method = method
        self.init = init
        self.init_group_factor = init_group_factor
        self.n_gh = n_gh
        self.hessian_floor = hessian_floor
        self.tol = tol
        self.max_iter = max_iter
        self.warm_start = warm_start

    def _spike_var(self) -> float:
        """``r0``, or ``R0_RATIO v0`` when it is not given."""
        return R0_RATIO * float(self.v0) if self.r0 is None else float(self.r0)

    def _check_extra(self, n_groups: int | None = None) -> None:
        """The spike narrower than the slab; one ``p0`` per group (or one for all), each inside (0, 1)."""
        if self._spike_var() >= self.v0:
            raise ValueError(f"r0 (the spike variance, {self._spike_var()}) must be smaller than v0 (the slab "
                             f"variance, {float(self.v0)})")
        val.check_probability(self.p0, n_groups, "p0")

    def _fit(self, X, y, labels, coef_group):
        """MAP estimate, then the Laplace approximation around it."""
        n, d = X.shape
        G = labels.shape[0]
        p0 = val.check_probability(self.p0, G, "p0")  # one per group
        tol, max_iter = float(self.tol), int(self.max_iter)
        # work on unit-size data (exact powers of two), so that the answer does not depend on the data's units
        scale = DataScale.of(X, y)
        X, y = X / scale.x, y / scale.y
        v0, r0 = scale.scaled_variance(float(self.v0), "v0"), scale.scaled_variance(self._spike_var(), "r0")
        noise_var = scale.scaled_noise(float(self.noise_var))
        groups = _Groups(coef_group, G)
        prior = _Prior(groups, p0, v0, r0)
        objective = _Objective(X, y, noise_var, prior)
        lipschitz = float(np.linalg.norm(X, 2)) ** 2
        best = None
        for w0 in self._starts(X, y, groups, p0, lipschitz, scale.coef):
            if self.method == "lbfgs":
                found = _lbfgs(objective, w0, tol, max_iter)
            else:
                found = _gist(objective, w0, lipschitz / noise_var, tol, max_iter)
            if best is None or found[1] < best[1]:
                best = found
        w, value, n_iter, converged = best
        a, c = self._prior_hessian(w, prior)
        covariance = _LaplaceCovariance(X, noise_var, groups, a, c, w)
        self.n_features_in_ = d
        self.group_labels_ = labels
        self.coef_ = w * scale.coef
        self.coef_var_ = np.maximum(covariance.diagonal(), 0.0) * scale.coef2
        self.group_prob_ = self._group_probabilities(w, covariance, prior, groups, int(self.n_gh))
        self.objective_ = value + 0.5 * d * math.log(scale.coef2)  # the log prior's normaliser in the data's units
        self.n_iter_ = n_iter
        self.converged_ = converged
        self.p0_ = float(np.mean(p0))
        self.v0_ = float(self.v0)
        self.noise_var_ = float(self.noise_var)
        self._covariance, self._var_unit = covariance, scale.coef2
        return self

    def _starts(self, X, y, groups, p0, lipschitz, coef_unit: float) -> list[np.ndarray]:
        """Where the MAP optimiser starts (on the unit-size data, whose coefficients are the data's divided by
        ``coef_unit``): the group-lasso path's solution (or zeros), and with ``warm_start`` also the last fit's
        estimate; the lower objective wins. (The warm start alone would keep the local minimum found at few rows:
        docs/model.md, section 5.)"""
        d = X.shape[1]
        fresh = np.zeros(d) if self.init == "zeros" else group_lasso_start(
            X, y, groups, math.ceil(float(self.init_group_factor) * float(np.mean(p0)) * groups.sizes.size),
            lipschitz)
        if self.warm_start and getattr(self, "coef_", None) is not None and self.coef_.shape == (d,):
            return [fresh, self.coef_ / coef_unit]
        return [fresh]

    def _prior_hessian(self, w, prior: _Prior) -> tuple[np.ndarray, np.ndarray]:
        """``a_g`` and ``c_g`` of ``B_g = a_g I - c_g w_g w_g^T`` at w (FLAS), or ``I / r_k`` (FLAS*)."""
        norm2 = prior.groups.sums(w * w)
        l1, l0 = prior.log_components(norm2)
        if self.method == "gist":
            return np.where(l1 >= l0, 1.0 / prior.r1, 1.0 / prior.r0), np.zeros_like(norm2)
        rho = expit(l1 - l0)
        a = prior.curvature(rho)
        c = rho * (1.0 - rho) * (1.0 / prior.r0 - 1.0 / prior.r1) ** 2
        floor = 1.0 / prior.r1 if self.hessian_floor else 0.0
        low = a - c * norm2 < floor  # the prior's log density is not concave between spike and slab
        c = np.where(low & (norm2 > 0), (a - floor) / np.maximum(norm2, 1e-300) * (1 - 1e-12), c)
        return a, c

    @staticmethod
    def _group_probabilities(w, covariance: _LaplaceCovariance, prior: _Prior, groups: _Groups,
                             n_gh: int) -> np.ndarray:
        """``E[rho_g(w_g)]`` with ``w_g ~ N(w_hat_g, Sigma_g)``, vectorised over groups of equal size."""
        prob = np.empty(groups.sizes.size)
        for size in np.unique(groups.sizes).astype(int):
            gs = np.flatnonzero(groups.sizes == size)
            members = groups.order.reshape(-1)[
                (groups.starts[gs][:, None] + np.arange(size))]  # (k, size) coefficient indices
            sigma = covariance.group_blocks(members)
            lam, Q = np.linalg.eigh(sigma)
            scale = Q * np.sqrt(np.maximum(lam, 0.0))[:, None, :]  # (k, size, size)
            nodes, weights = _quadrature_nodes(size, n_gh)
            points = w[members][:, None, :] + np.einsum("kij,nj->kni", scale, nodes)  # (k, N, size)
            norm2 = np.sum(points * points, axis=2)
            l1 = prior.const1[gs][:, None] - norm2 / (2 * prior.r1)
            l0 = prior.const0[gs][:, None] - norm2 / (2 * prior.r0)
            prob[gs] = expit(l1 - l0) @ weights
        return prob

    def cov_matvec(self, v):
        """Laplace posterior covariance times v, shape (d,) or (d, k); O(n d k), never forming it."""
        check_is_fitted(self, "coef_")
        return self._var_unit * self._covariance.matvec(val.check_vector_or_block(v, self.n_features_in_))

    def predict(self, X, return_std: bool = False):
        """Mean ``X w_hat`` (and the predictive standard deviation ``sqrt(x^T H^{-1} x + s2)``)."""
        check_is_fitted(self, "coef_")
        X = val.check_predict_rows(self, X)
        mean = X @ self.coef_
        if not return_std:
            return mean
        quad = np.einsum("ij,ij->i", X, self._var_unit * self._covariance.matvec(X.T).T)
        return mean, np.sqrt(np.maximum(quad, 0.0) + self.noise_var_)


class UngroupedFLAS(FLAS):
    """FLAS with one spike-and-slab component per coefficient.

    Parameters
    ----------
    p0 : float or array-like of shape (d,)
        Prior probability of the slab for each coefficient.
    v0 : float
        Slab variance r1, in signal units squared.
    noise_var : float
        Variance of the measurement noise.
    **options
        Every keyword option of :class:`FLAS` (``r0``, ``method``, ``init``, ...).

    Attributes
    ----------
    Those of :class:`FLAS`; ``group_prob_`` (shape (d,)) holds each coefficient's slab probability.

    Examples
    --------
    >>> from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    >>> p = make_e1_problem(experiment_rng("E1", 0, 0))  # 512 coefficients in 128 groups of 4, 64 rows
    >>> from adaptcs.models import UngroupedFLAS
    >>> est = UngroupedFLAS(p0=16 / 512, v0=1 / 3, noise_var=1.0).fit(p.X, p.y)
    >>> est.coef_.shape
    (512,)
    """

    _parameter_constraints = constraints.without_groups(FLAS._parameter_constraints)

    def __init__(self, *, p0=0.5, v0=1.0, noise_var=1.0, r0=None, method="lbfgs", init="group_lasso",
                 init_group_factor=2.0, n_gh=5, hessian_floor=True, tol=1e-8, max_iter=5000, warm_start=False):
        super().__init__(None, p0=p0, v0=v0, noise_var=noise_var, r0=r0, method=method, init=init,
                         init_group_factor=init_group_factor, n_gh=n_gh, hessian_floor=hessian_floor, tol=tol,
                         max_iter=max_iter, warm_start=warm_start)

    def _resolve_groups(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        index = np.arange(d, dtype=np.intp)
        return index, index
