"""Group automatic relevance determination (G-ARD): exact type-II maximum likelihood of group variances.

Prior ``w_g ~ N(0, lam_g I)`` with ``lam_g >= 0``; the evidence ``log N(y | 0, C)``, ``C = s2 I + X A X^T``,
``A = diag(lam_{g(j)})``, is maximised by coordinate ascent over the groups, all ``lam_g = 0`` at the start
(docs/model.md section 5). For group g, with ``C_g`` = C without group g's term and ``M = X_g^T C_g^{-1} X_g``
with eigenpairs ``(s_k, e_k)`` and ``q_k = e_k^T X_g^T C_g^{-1} y``, the evidence as a function of ``lam_g`` is

    L(lam) = 1/2 sum_k [ q_k^2 lam / (1 + lam s_k) - log(1 + lam s_k) ]     (up to a constant),

maximised exactly in one dimension. ``C^{-1}`` and ``Z = C^{-1} X`` are kept current by rank-d_g updates
(O(n^2 d_g + n d d_g) per changed group, one O(n^2 d) product per sweep to pick the groups worth visiting)
and recomputed from a Cholesky factor every ``refactor_every`` sweeps for stability.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import brentq
from sklearn.exceptions import ConvergenceWarning

from adaptcs import _validation as val
from adaptcs.models import _constraints as constraints
from adaptcs.models._base import GroupRegressor
from adaptcs.models._gaussian import GaussianPosteriorMixin, LinearGaussianModel
from adaptcs.models._scaling import DataScale, uninformed_noise

_LOG_2PI = float(np.log(2.0 * np.pi))
MAX_SIGNAL_TO_NOISE = 1e20  # mean(y^2) / noise_var beyond this cannot be resolved in double precision
NOISE_FLOOR = 1e-6  # a learned noise variance stays above this fraction of mean(y^2)
LEARNABLE = ("noise_var",)  # what ``learn`` may name
_CANCELLATION = 1e-8  # rank updates whose factors 1 + delta sigma fall below this are replaced by a refactorisation


def optimal_group_variance(s: np.ndarray, q: np.ndarray) -> float:
    """Maximiser over ``lam >= 0`` of ``1/2 sum_k [q_k^2 lam / (1 + lam s_k) - log(1 + lam s_k)]``.

    Parameters
    ----------
    s : ndarray, shape (d_g,)
        Eigenvalues ``s_k >= 0`` of ``X_g^T C_g^{-1} X_g``.
    q : ndarray, shape (d_g,)
        Projections ``q_k``.

    Returns
    -------
    float
        0 when the gradient at 0, ``1/2 sum_k (q_k^2 - s_k)``, is not positive; otherwise the root of the
        gradient in ``(0, max_k (q_k^2 - s_k) / s_k^2]`` (every term decreases past its own optimum).
    """
    q2 = q * q
    if np.sum(q2 - s) <= 0.0:
        return 0.0
    informative = s > 1e-12 * max(np.max(s), 1e-300)
    if not np.any(informative):
        return 0.0
    s, q2 = s[informative], q2[informative]
    if s.shape[0] == 1:
        return max(float((q2[0] - s[0]) / s[0] ** 2), 0.0)

    upper = float(np.max((q2 - s) / (s * s)))
    # Plain floats: groups are small, and numpy's per-call overhead would dominate the root search.
    terms = list(zip(s.tolist(), q2.tolist(), strict=True))

    def gradient(lam):
        return sum((qk - sk - lam * sk * sk) / (1.0 + lam * sk) ** 2 for sk, qk in terms)

    if gradient(upper) >= 0.0:  # only rounding can put the root at the bracket's end
        return upper
    if not (np.isfinite(upper) and np.isfinite(gradient(0.0))):
        raise np.linalg.LinAlgError(f"non-finite evidence gradient for a group (s={s}, q^2={q2})")
    return float(brentq(gradient, 0.0, upper, xtol=1e-14, rtol=1e-12))


class _EvidenceState:
    """``C^{-1}``, ``log|C|`` and ``Z = C^{-1} X`` for the current group variances."""

    def __init__(self, X, y, noise_var, coef_group, group_var):
        self.X, self.y, self.noise_var = X, y, noise_var
        self.coef_group = coef_group
        self.group_var = group_var.astype(float).copy()
        self.refactor()

    def refactor(self):
        n = self.X.shape[0]
        a = self.group_var[self.coef_group]
        active = a > 0
        Xa = self.X[:, active]
        C = (Xa * a[active]) @ Xa.T
        C.flat[:: n + 1] += self.noise_var
        factor = cho_factor(C, lower=True, check_finite=False)
        self.Cinv = cho_solve(factor, np.eye(n), check_finite=False)
        self.log_det = float(2.0 * np.sum(np.log(np.diag(factor[0]))))
        self.Z = self.Cinv @ self.X

    def log_evidence(self) -> float:
        n = self.X.shape[0]
        return float(-0.5 * (n * _LOG_2PI + self.log_det + self.y @ (self.Cinv @ self.y)))

    def update_group(self, members: np.ndarray, g: int) -> float:
        """Maximise the evidence over group g's variance; returns the change of the variance."""
        Zg = self.Z[:, members]
        S = self.X[:, members].T @ Zg  # X_g^T C^{-1} X_g
        sigma, U = np.linalg.eigh(0.5 * (S + S.T))
        sigma = np.maximum(sigma, 0.0)
        lam = self.group_var[g]
        # Remove the group's own term: M = S (I - lam S)^{-1}, X_g^T C_g^{-1} y = (I - lam S)^{-1} X_g^T C^{-1} y.
        shrink = 1.0 - lam * sigma
        if lam > 0.0 and np.min(shrink) < _CANCELLATION:  # the group dominates C: removing it by formula cancels
            self.group_var[g] = 0.0
            self.refactor()
            return self.update_group(members, g) - lam
        s = sigma / shrink
        q = (U.T @ (Zg.T @ self.y)) / shrink
        new = optimal_group_variance(s, q)
        delta = new - lam
        if delta == 0.0:
            return 0.0
        if np.min(1.0 + delta * sigma) < _CANCELLATION:  # a downdate that would cancel: refactor instead
            self.group_var[g] = new
            self.refactor()
            return delta
        # C <- C + delta X_g X_g^T, in the eigenbasis of S: C^{-1} -= W diag(delta / (1 + delta sigma)) W^T.
        W = Zg @ U
        c = delta / (1.0 + delta * sigma)
        Wc = W * c
        self.Cinv -= Wc @ W.T
        self.Z -= Wc @ (W.T @ self.X)
        self.log_det += float(np.sum(np.log1p(delta * sigma)))
        self.group_var[g] = new
        return delta

    def update_noise(self, floor: float) -> float:
        """Maximise the evidence over the noise variance (>= ``floor``) with the group variances fixed; returns
        the change. Exact: with ``X A X^T = U diag(mu) U^T`` and ``r = U^T y`` the evidence is
        ``-1/2 sum_i [log(s2 + mu_i) + r_i^2 / (s2 + mu_i)]``, maximised in one dimension (O(n^3))."""
        a = self.group_var[self.coef_group]
        active = a > 0
        Xa = self.X[:, active]
        mu, U = np.linalg.eigh((Xa * a[active]) @ Xa.T)
        mu = np.maximum(mu, 0.0)
        r2 = (U.T @ self.y) ** 2

        def evidence(s2):
            return -0.5 * float(np.sum(np.log(s2 + mu) + r2 / (s2 + mu)))

        def gradient(s2):
            return float(np.sum(r2 / (s2 + mu) ** 2 - 1.0 / (s2 + mu)))

        old = self.noise_var
        upper = 2.0 * max(float(np.mean(r2)), floor)
        for _ in range(200):  # the evidence falls off as -n/2 log s2 for large s2: a bracket is soon found
            if gradient(upper) < 0.0:
                break
            upper *= 2.0
        if gradient(floor) <= 0.0:
            new = floor
        elif gradient(upper) >= 0.0:
            new = upper
        else:
            new = float(brentq(gradient, floor, upper, xtol=1e-14 * upper, rtol=1e-12))
        if evidence(new) < evidence(old):  # a stationary point that is not an improvement: keep the old value
            return 0.0
        self.noise_var = new
        self.refactor()
        return new - old

    def candidates(self, n_groups: int) -> np.ndarray:
        """Groups worth visiting: active ones, and inactive ones whose evidence gradient at 0 is positive."""
        diag_S = np.einsum("ij,ij->j", self.X, self.Z)
        Zy = self.Z.T @ self.y
        grad0 = np.bincount(self.coef_group, weights=Zy * Zy - diag_S, minlength=n_groups)
        return np.flatnonzero((self.group_var > 0) | (grad0 > 0))


class GroupARD(GaussianPosteriorMixin, GroupRegressor):
    """Group ARD: Gaussian prior per group with variances set by maximising the evidence.

    Parameters
    ----------
    groups : array-like, shape (d,)
        Group label of each coefficient (mapped to 0..G-1 in sorted label order).
    noise_var : float or None
        Noise variance ``sigma0^2``. None (the default): learned by the evidence, as with ``learn``.
    tol : float
        Stop when the log evidence changes by less than ``tol`` (relative) over a sweep.
    max_iter : int
        Sweep cap; reaching it sets ``converged_ = False`` and warns.
    refactor_every : int
        Recompute ``C^{-1}`` from a fresh Cholesky factor every this many sweeps.
    warm_start : bool
        Start from the previous fit's group variances (and learned noise variance) instead of all zero.
    learn : tuple, () or ("noise_var",)
        ``("noise_var",)`` also maximises the evidence over the noise variance (``noise_var`` is the start), by
        an exact one-dimensional maximisation after every sweep over the groups.

    Attributes
    ----------
    coef_ : ndarray, shape (d,)
        Posterior mean of ``w`` given the learned variances.
    coef_var_ : ndarray, shape (d,)
        Posterior marginal variances (exactly 0 in groups switched off).
    group_var_ : ndarray, shape (G,)
        Learned group variances ``lam_g`` (sorted label order, ``group_labels_``).
    group_labels_ : ndarray, shape (G,)
    log_evidence_ : float
        ``log N(y | 0, C)`` at the learned variances (nats).
    n_iter_ : int
        Sweeps done.
    converged_ : bool
    evidence_trace_ : ndarray, shape (n_iter_ + 1,)
        Log evidence at the start and after every sweep (never decreases).
    noise_var_ : float
        The noise variance of the fit (learned, or the given one).

    Examples
    --------
    >>> from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    >>> from adaptcs.metrics import relative_error
    >>> p = make_e1_problem(experiment_rng("E1", 0, 0))  # 512 coefficients in 128 groups of 4, 64 rows
    >>> from adaptcs.models import GroupARD
    >>> est = GroupARD(p.groups, noise_var=1.0).fit(p.X, p.y)
    >>> est.converged_, est.group_var_.shape
    (True, (128,))
    >>> relative_error(est.coef_, p.w_true) < 0.6
    True
    """

    _parameter_constraints = {"groups": constraints.GROUPS, "noise_var": constraints.POSITIVE_OR_NONE,
                              "tol": constraints.POSITIVE, "max_iter": constraints.COUNT,
                              "refactor_every": constraints.COUNT, "warm_start": constraints.BOOLEAN,
                              "learn": constraints.NAMES}

    def __init__(self, groups=None, *, noise_var=None, tol=1e-6, max_iter=500, refactor_every=10, warm_start=False,
                 learn=()):
        self.groups = groups
        self.noise_var = noise_var
        self.tol = tol
        self.max_iter = max_iter
        self.refactor_every = refactor_every
        self.warm_start = warm_start
        self.learn = learn

    def _check_extra(self, n_groups: int | None = None) -> None:
        """Only the noise variance can be learned."""
        val.check_names(self.learn, LEARNABLE, "learn")

    def _fit(self, X, y, labels, coef_group):
        """Maximise the evidence over the group variances, then form the Gaussian posterior."""
        n, d = X.shape
        try:
            noise_var = uninformed_noise(y) if self.noise_var is None else float(self.noise_var)  # None: learned
        except ValueError as exc:
            raise ValueError(f"GroupARD: {exc}") from None
        tol, max_iter, refactor_every = float(self.tol), int(self.max_iter), int(self.refactor_every)
        G = labels.shape[0]
        # Work on data of unit size (exact power-of-two rescaling): the maximiser of the evidence is equivariant,
        # the group variances scale with unit^2 and the coefficients with unit.
        scale = DataScale.of(X, y)
        unit, unit2 = scale.coef, scale.coef2
        Xs, ys, noise_s = X / scale.x, y / scale.y, scale.scaled_noise(noise_var)
        signal_to_noise = float(np.mean(ys * ys)) / noise_s
        if signal_to_noise > MAX_SIGNAL_TO_NOISE:
            raise ValueError(f"GroupARD: mean(y^2) / noise_var = {signal_to_noise:.3g} exceeds "
                             f"{MAX_SIGNAL_TO_NOISE:.0e}, beyond what double precision can resolve; noise_var is "
                             "probably in the wrong units")
        learn_noise = "noise_var" in val.check_names(self.learn, LEARNABLE, "learn") or self.noise_var is None
        if self.warm_start and hasattr(self, "group_var_"):
            if self.group_var_.shape[0] != G:
                raise ValueError(f"warm_start: the previous fit had {self.group_var_.shape[0]} groups, now {G}")
            start = self.group_var_ / unit2
            if learn_noise:
                noise_s = scale.scaled_noise(self.noise_var_)
        else:
            start = np.zeros(G)
        _order, members = val.group_members(coef_group, G)

        log_unit = Xs.shape[0] * np.log(scale.y)  # log evidence in original units = scaled one - log_unit
        try:
            state = _EvidenceState(Xs, ys, noise_s, coef_group, start)
            trace = [state.log_evidence() - log_unit]
            converged = False
            n_iter = 0
            for n_iter in range(1, max_iter + 1):  # noqa: B007 (read after the loop)
                for g in state.candidates(G):
                    state.update_group(members[g], g)
                if learn_noise:
                    state.update_noise(NOISE_FLOOR * float(np.mean(ys * ys)))
                if n_iter % refactor_every == 0:
                    state.refactor()
                trace.append(state.log_evidence() - log_unit)
                if not np.isfinite(trace[-1]):
                    raise np.linalg.LinAlgError("the log evidence became non-finite")
                if abs(trace[-1] - trace[-2]) <= tol * abs(trace[-1]):
                    converged = True
                    break
            state.refactor()
        except np.linalg.LinAlgError as exc:
            raise ValueError(f"GroupARD: the evidence could not be computed stably ({exc}); X, y and noise_var "
                             "are numerically degenerate together") from None
        if not converged:
            warnings.warn(f"GroupARD: evidence still changing after {max_iter} sweeps "
                          f"(last change {trace[-1] - trace[-2]:.3g})", ConvergenceWarning, stacklevel=5)

        noise_s = state.noise_var
        if learn_noise and noise_s <= 1.01 * NOISE_FLOOR * float(np.mean(ys * ys)):
            # Not a numerical failure: with n rows and at least n coefficients switched on, the evidence grows
            # as the noise variance goes to 0 (the fit interpolates the data). Seen on E1 (64 rows, 512
            # coefficients) from every start.
            warnings.warn(f"GroupARD: the evidence drove the learned noise variance to its floor ({NOISE_FLOOR:g} "
                          f"mean(y^2)) with {int(np.sum(state.group_var > 0))} groups on: the fit interpolates the "
                          f"{n} measurements; give noise_var instead of learning it", UserWarning, stacklevel=5)
        prior_var = state.group_var[coef_group]
        noise_var = noise_s * scale.y**2
        post = LinearGaussianModel(Xs, ys, noise_s, form="woodbury").posterior(prior_var, np.zeros(d))
        self.n_features_in_ = d
        self.group_labels_ = labels
        self.group_var_ = state.group_var * unit2
        self.coef_ = post.mean * unit
        self.coef_var_ = np.maximum(post.var, 0.0) * unit2
        self.log_evidence_ = state.log_evidence() - log_unit
        self.evidence_trace_ = np.asarray(trace)
        self.n_iter_ = n_iter
        self.converged_ = converged
        self.noise_var_ = float(noise_var)
        self._posterior = post
        self._cov_unit = unit2
        self._noise_var = noise_var
        return self
