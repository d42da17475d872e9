"""Group spike-and-slab linear regression fitted by expectation propagation (GSS-EP and SS-EP).

Model (Hernandez-Lobato, Hernandez-Lobato & Dupont, JMLR 2013; ``shared/spec/ALGORITHMS.md`` section 1)::

    y | w ~ N(X w, s2 I),   z_g ~ Bernoulli(p0_g),
    w_g | z_g = 1 ~ N(0, v0 I),   w_g | z_g = 0 = 0.

EP approximates the posterior by ``N(w | m, V) prod_g Bernoulli(z_g | sigmoid(p_g))``. The likelihood and the
prior on ``z`` are kept exactly; the d prior factors are replaced by sites
``exp(-(w_j - mt_j)^2 / (2 vt_j)) Bernoulli(z_g(j) | sigmoid(pt_j))`` that are refined in parallel, with damping
in natural parameters. Each iteration costs one Cholesky factorisation (of an n x n matrix when n < d) that
serves means, variances and ``V v`` products; see :mod:`adaptcs.models._gaussian`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, log_expit, logit
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning

from adaptcs.models import _validation as val
from adaptcs.models._gaussian import GaussianPosteriorMixin, LinearGaussianModel

_LOG_2PI = float(np.log(2.0 * np.pi))


@dataclass
class EPSites:
    """The d prior sites of EP (the only factors that are iterated).

    Attributes
    ----------
    var : ndarray, shape (d,)
        Site variances ``vt`` (always > 0).
    mean : ndarray, shape (d,)
        Site means ``mt``.
    logit : ndarray, shape (d,)
        Site log-odds ``pt`` of the Bernoulli part for the coefficient's group.
    """

    var: np.ndarray
    mean: np.ndarray
    logit: np.ndarray

    @classmethod
    def initial(cls, p0_per_coef: np.ndarray, v0: float) -> EPSites:
        """Sites at the start of EP: ``vt = p0 v0`` (the prior's variance), ``mt = 0``, ``pt = 0``."""
        d = p0_per_coef.shape[0]
        return cls(var=p0_per_coef * v0, mean=np.zeros(d), logit=np.zeros(d))

    def copy(self) -> EPSites:
        return EPSites(self.var.copy(), self.mean.copy(), self.logit.copy())


def _log_normal_at_zero(mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """``log N(0 | mean, var)``, elementwise."""
    return -0.5 * (_LOG_2PI + np.log(var) + mean * mean / var)


@dataclass
class _Cavity:
    var: np.ndarray  # vc, shape (d,); only meaningful where ``valid``
    mean: np.ndarray  # mc
    logit: np.ndarray  # pc
    valid: np.ndarray  # bool, cavity variance finite and positive


def _cavity(post, sites: EPSites, coef_group_logit) -> _Cavity:
    """Remove each site from the posterior marginals (ALGORITHMS.md: cavity for site j)."""
    marg_mean, marg_var = post.mean, post.var
    # 1/V_jj - 1/vt_j, written so it does not cancel when V_jj is within rounding of vt_j.
    cav_prec = post.var_reduction / (marg_var * sites.var)
    valid = cav_prec > 0.0
    safe_prec = np.where(valid, cav_prec, 1.0)
    var = 1.0 / safe_prec
    mean = var * (marg_mean / marg_var - sites.mean / sites.var)
    valid &= np.isfinite(var) & np.isfinite(mean)
    return _Cavity(var=var, mean=mean, logit=coef_group_logit - sites.logit, valid=valid)


def _matched_sites(cav: _Cavity, v0: float, v_inf: float) -> EPSites:
    """Sites that match the moments of (exact spike-and-slab factor) x (cavity), for every j.

    Where the matched site variance is not positive, it is set to ``v_inf`` and the site mean is chosen so
    the moment-matched posterior mean is kept: ``mt = mc - a (vt + vc)``.
    """
    vc, mc, pc = cav.var, cav.mean, cav.logit
    slab_var = vc + v0
    pt = _log_normal_at_zero(mc, slab_var) - _log_normal_at_zero(mc, vc)
    r1 = expit(pt + pc)  # responsibility of the slab
    r0 = 1.0 - r1
    a = r1 * mc / slab_var + r0 * mc / vc
    b = r1 * (mc * mc - slab_var) / slab_var**2 + r0 * (mc * mc - vc) / vc**2
    curvature = a * a - b
    with np.errstate(divide="ignore", invalid="ignore"):
        vt = 1.0 / curvature - vc
    ok = (curvature > 0.0) & (vt > 0.0) & np.isfinite(vt)
    vt = np.where(ok, vt, v_inf)
    mt = mc - a * (vt + vc)
    return EPSites(var=vt, mean=mt, logit=pt)


def _damped(old: EPSites, new: EPSites, valid: np.ndarray, xi: float) -> EPSites:
    """Convex combination in natural parameters (1/vt, mt/vt, pt); sites with an invalid cavity are kept."""
    prec = np.where(valid, xi / new.var + (1.0 - xi) / old.var, 1.0 / old.var)
    nat_mean = np.where(valid, xi * new.mean / new.var + (1.0 - xi) * old.mean / old.var, old.mean / old.var)
    logit_ = np.where(valid, xi * new.logit + (1.0 - xi) * old.logit, old.logit)
    var = 1.0 / prec
    return EPSites(var=var, mean=nat_mean * var, logit=logit_)


def _log_evidence(model: LinearGaussianModel, post, sites: EPSites, cav: _Cavity,
                  prior_logit: np.ndarray, coef_group: np.ndarray, v0: float) -> float:
    """EP approximation of ``log p(y | X)`` (seed eq. 28, as restated in ALGORITHMS.md)."""
    n, d, s2 = model.n, model.d, model.noise_var
    vt, mt, pt = sites.var, sites.mean, sites.logit
    vc, mc, pc = cav.var, cav.mean, cav.logit
    log_s1 = -0.5 * n * (_LOG_2PI + np.log(s2)) - model.yty / (2.0 * s2)
    log_kappa = np.logaddexp(log_expit(pc) + _log_normal_at_zero(mc, vc + v0),
                             log_expit(-pc) + _log_normal_at_zero(mc, vc))
    log_bern_norm = np.logaddexp(log_expit(pt) + log_expit(pc), log_expit(-pt) + log_expit(-pc))
    log_s2 = log_kappa - log_bern_norm - 0.5 * (_LOG_2PI + np.log(vt)) - _log_normal_at_zero(mc - mt, vt + vc)
    G = prior_logit.shape[0]
    sum_on = np.bincount(coef_group, weights=log_expit(pt), minlength=G)
    sum_off = np.bincount(coef_group, weights=log_expit(-pt), minlength=G)
    log_groups = np.logaddexp(log_expit(prior_logit) + sum_on, log_expit(-prior_logit) + sum_off)
    return float(log_s1 + np.sum(log_s2) + np.sum(log_groups) - 0.5 * np.sum(mt * mt / vt)
                 + 0.5 * d * _LOG_2PI + 0.5 * post.log_det() + 0.5 * float(post.eta @ post.mean))


class GroupSpikeSlabEP(GaussianPosteriorMixin, RegressorMixin, BaseEstimator):
    """Group spike-and-slab linear regression fitted by EP (the paper's GSS-EP).

    Parameters
    ----------
    groups : array-like, shape (d,)
        Group label of each coefficient (any sortable labels; group g is the g-th label in sorted order).
    p0 : float or array-like of shape (G,)
        Prior probability that a group is active; one value per group (in sorted label order) encodes
        prior knowledge of likely groups. Strictly inside (0, 1).
    v0 : float
        Slab variance: prior variance of each coefficient of an active group.
    noise_var : float
        Noise variance ``sigma0^2``.
    damping : float in (0, 1]
        Initial damping ``xi`` (weight of the new site in natural parameters).
    damping_decay : float in (0, 1]
        Factor applied to ``xi`` after every iteration.
    tol : float
        Convergence threshold on the largest change of the posterior mean and of the group probabilities.
    max_iter : int
        Iteration cap; reaching it sets ``converged_ = False`` and warns.
    v_inf : float
        Site variance used where moment matching gives a non-positive one.
    warm_start : bool
        Start from the sites of the previous fit (same number of coefficients) instead of the prior.

    Attributes
    ----------
    coef_ : ndarray, shape (d,)
        Posterior mean of ``w``.
    coef_var_ : ndarray, shape (d,)
        Posterior marginal variances.
    group_prob_ : ndarray, shape (G,)
        Posterior probability that each group is active, in sorted label order (``group_labels_``).
    group_labels_ : ndarray, shape (G,)
    log_evidence_ : float
        EP approximation of ``log p(y | X)`` (nats).
    n_iter_ : int
    converged_ : bool
    sites_ : EPSites
        The fitted sites (used by ``warm_start``).
    """

    def __init__(self, groups, p0=0.5, v0=1.0, noise_var=1.0, *, damping=0.9, damping_decay=0.99, tol=1e-4,
                 max_iter=1000, v_inf=100.0, warm_start=False):
        self.groups = groups
        self.p0 = p0
        self.v0 = v0
        self.noise_var = noise_var
        self.damping = damping
        self.damping_decay = damping_decay
        self.tol = tol
        self.max_iter = max_iter
        self.v_inf = v_inf
        self.warm_start = warm_start

    def _resolve_groups(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted distinct labels (G,) and the group index of each coefficient (d,)."""
        return val.check_groups(self.groups, d)

    def _check_params(self, d: int):
        labels, coef_group = self._resolve_groups(d)
        p0 = val.check_probability(self.p0, labels.shape[0], "p0")
        v0 = val.check_positive_scalar(self.v0, "v0")
        noise_var = val.check_positive_scalar(self.noise_var, "noise_var")
        val.check_fraction(self.damping, "damping")
        val.check_fraction(self.damping_decay, "damping_decay")
        val.check_positive_scalar(self.tol, "tol")
        val.check_count(self.max_iter, "max_iter")
        val.check_positive_scalar(self.v_inf, "v_inf")
        return labels, coef_group, p0, v0, noise_var

    def fit(self, X, y):
        """Run EP to convergence (or ``max_iter``).

        Parameters
        ----------
        X : array-like, shape (n, d)
            Measurement rows.
        y : array-like, shape (n,)
            Measurements.

        Returns
        -------
        self
        """
        X, y = val.check_design(X, y)
        d = X.shape[1]
        labels, coef_group, p0, v0, noise_var = self._check_params(d)
        prior_logit = logit(p0)  # p3_g, shape (G,)
        G = labels.shape[0]

        if self.warm_start and hasattr(self, "sites_"):
            if self.sites_.var.shape[0] != d:
                raise ValueError(f"warm_start: the previous fit had {self.sites_.var.shape[0]} coefficients, "
                                 f"X has {d} columns")
            sites = self.sites_.copy()
        else:
            sites = EPSites.initial(p0[coef_group], v0)

        model = LinearGaussianModel(X, y, noise_var)

        def group_logit_of(s: EPSites) -> np.ndarray:
            return prior_logit + np.bincount(coef_group, weights=s.logit, minlength=G)

        post = model.posterior(sites.var, sites.mean / sites.var)
        group_logit = group_logit_of(sites)
        group_prob = expit(group_logit)
        xi = float(self.damping)
        converged = False
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007 (read after the loop)
            cav = _cavity(post, sites, group_logit[coef_group])
            sites = _damped(sites, _matched_sites(cav, v0, self.v_inf), cav.valid, xi)
            xi *= self.damping_decay
            new_post = model.posterior(sites.var, sites.mean / sites.var)
            group_logit = group_logit_of(sites)
            new_group_prob = expit(group_logit)
            # Converge on the group probabilities rather than their log-odds: the log-odds of a group
            # that is surely on or off can drift by more than tol while its probability no longer moves.
            change = max(np.max(np.abs(new_post.mean - post.mean)), np.max(np.abs(new_group_prob - group_prob)))
            post, group_prob = new_post, new_group_prob
            if change < self.tol:
                converged = True
                break

        if not converged:
            warnings.warn(f"{type(self).__name__}: EP did not converge in {self.max_iter} iterations "
                          f"(last change {change:.3g} > tol={self.tol})", ConvergenceWarning, stacklevel=2)

        cav = _cavity(post, sites, group_logit[coef_group])
        if np.all(cav.valid):
            log_ev = _log_evidence(model, post, sites, cav, prior_logit, coef_group, v0)
        else:
            warnings.warn(f"{type(self).__name__}: {np.count_nonzero(~cav.valid)} site(s) have no valid cavity at "
                          "the end of EP; log_evidence_ is NaN", RuntimeWarning, stacklevel=2)
            log_ev = float("nan")

        self.n_features_in_ = d
        self.group_labels_ = labels
        self.sites_ = sites
        self.coef_ = post.mean
        self.coef_var_ = post.var
        self.group_prob_ = group_prob
        self.log_evidence_ = log_ev
        self.n_iter_ = n_iter
        self.converged_ = converged
        self._posterior = post
        self._noise_var = noise_var
        return self



class SpikeSlabEP(GroupSpikeSlabEP):
    """Spike-and-slab linear regression fitted by EP (the paper's SS-EP): one group per coefficient.

    Parameters are those of :class:`GroupSpikeSlabEP` without ``groups``; ``p0`` is a scalar or one value
    per coefficient. ``group_prob_`` (shape (d,)) holds each coefficient's posterior inclusion probability.
    """

    def __init__(self, p0=0.5, v0=1.0, noise_var=1.0, *, damping=0.9, damping_decay=0.99, tol=1e-4,
                 max_iter=1000, v_inf=100.0, warm_start=False):
        super().__init__(None, p0, v0, noise_var, damping=damping, damping_decay=damping_decay, tol=tol,
                         max_iter=max_iter, v_inf=v_inf, warm_start=warm_start)

    def _resolve_groups(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        index = np.arange(d, dtype=np.intp)
        return index, index
