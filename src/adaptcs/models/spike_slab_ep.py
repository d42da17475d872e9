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
from adaptcs.models._scaling import DataScale

_LOG_2PI = float(np.log(2.0 * np.pi))
# converged_ needs the undamped change below RESIDUAL_FACTOR * tol (the damped one is below tol when EP stops)
RESIDUAL_FACTOR = 10.0
# Refuse problems whose prior signal-to-noise ratio double precision cannot resolve at all; distrust fits whose
# variances may have lost MAX_VARIANCE_ERROR relative accuracy to cancellation (about eps * signal-to-noise).
MAX_SIGNAL_TO_NOISE = 1e20
MAX_VARIANCE_ERROR = 1e-3
# The adaptive schedule of warm refits: when the best undamped change of the last STALL_WINDOW iterations is not
# below STALL_FACTOR times the best before them, EP is not approaching a fixed point (it circles one: parallel EP
# has slowly damped oscillating modes after some new rows), and the damping decays by COOL_DECAY per iteration
# from then on instead of damping_decay. The run then ends (not converged) after tens of iterations instead of the
# ~500 the paper's decay needs; the fast decay still averages the oscillation like the slow one does.
STALL_WINDOW = 30
STALL_FACTOR = 0.7
COOL_DECAY = 0.85
SCHEDULES = ("adaptive", "decay")
LEARNABLE = ("p0", "v0", "noise_var")  # hyper-parameters that can be learned (models/_ep_learning.py)
LEARN_METHODS = ("evidence", "cv")


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
    with np.errstate(divide="ignore", invalid="ignore"):  # a variance lost to rounding (0) gives no cavity
        cav_prec = post.var_reduction / (marg_var * sites.var)
    valid = (cav_prec > 0.0) & (marg_var > 0.0)
    safe_prec = np.where(valid, cav_prec, 1.0)
    var = 1.0 / safe_prec
    mean = var * (marg_mean / np.where(valid, marg_var, 1.0) - sites.mean / sites.var)
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
    """EP approximation of ``log p(y | X)`` (seed eq. 28, as restated in ALGORITHMS.md), rearranged for accuracy.

    The Gaussian terms of eq. 28 (``log s1``, the sites' ``-1/2 log(2 pi vt) - mt^2 / (2 vt)``, ``d/2 log 2 pi``,
    ``1/2 log|V|`` and ``1/2 u^T V u``) add up to ``log N(y | X mt, K)``, ``K = s2 I + X diag(vt) X^T``. With
    little noise, ``y^T y / (2 s2)`` and ``u^T V u / 2`` are huge and cancel; here the quadratic form is taken
    as the minimum ``r^T K^{-1} r = |y - X m|^2 / s2 + sum_j (m_j - mt_j)^2 / vt_j`` (a sum of positive terms,
    first-order insensitive to rounding in m), and ``log|K|`` from the Cholesky factor.
    """
    vt, mt, pt = sites.var, sites.mean, sites.logit
    vc, mc, pc = cav.var, cav.mean, cav.logit
    m = post.mean
    resid = model.y - model.X @ m
    quad = float(resid @ resid) / model.noise_var + float(np.sum((m - mt) ** 2 / vt))
    log_gauss = -0.5 * (model.n * _LOG_2PI + post.log_det_marginal() + quad)
    log_kappa = np.logaddexp(log_expit(pc) + _log_normal_at_zero(mc, vc + v0),
                             log_expit(-pc) + _log_normal_at_zero(mc, vc))
    log_bern_norm = np.logaddexp(log_expit(pt) + log_expit(pc), log_expit(-pt) + log_expit(-pc))
    log_sites = log_kappa - log_bern_norm - _log_normal_at_zero(mc - mt, vt + vc)
    G = prior_logit.shape[0]
    sum_on = np.bincount(coef_group, weights=log_expit(pt), minlength=G)
    sum_off = np.bincount(coef_group, weights=log_expit(-pt), minlength=G)
    log_groups = np.logaddexp(log_expit(prior_logit) + sum_on, log_expit(-prior_logit) + sum_off)
    return float(log_gauss + np.sum(log_sites) + np.sum(log_groups))


@dataclass
class _EPRun:
    """The end of one EP run on unit-size data (see :func:`_run_ep`)."""

    sites: EPSites
    post: object  # WoodburyPosterior or DirectPosterior
    group_prob: np.ndarray  # (G,)
    cavity: _Cavity  # at the final sites
    n_iter: int
    stopped: bool  # the damped change fell below tol (the paper's rule)
    residual: float  # the last change divided by its damping: small at a fixed point
    change: float
    failure: str | None  # why EP stopped early, if it did
    ill_conditioned: float | None  # the signal-to-noise ratio, when too large for accurate variances
    converged: bool
    log_evidence: float  # of the unit-size data; NaN when EP failed or some cavity is invalid


def _run_ep(model: LinearGaussianModel, sites: EPSites, prior_logit: np.ndarray, coef_group: np.ndarray,
            v0: float, v_inf: float, *, damping: float, damping_decay: float, tol: float, max_iter: int,
            adapt=None, schedule: str = "decay") -> _EPRun:
    """Iterate EP from ``sites`` until the damped change is below ``tol`` or ``max_iter`` (no warnings).

    Parameters
    ----------
    model : LinearGaussianModel
        Unit-size data and noise variance.
    sites : EPSites
        Starting sites, shape (d,) each.
    prior_logit : ndarray, shape (G,)
        ``logit(p0_g)``.
    coef_group : ndarray of int, shape (d,)
        Group index of each coefficient.
    v0, v_inf : float
        Slab variance and clamped site variance, in the units of the unit-size data.
    adapt : callable, optional
        Hyper-parameters that move with the sites (learning): called every iteration as
        ``adapt(post, cavity, group_prob, weight)`` with the damping ``weight`` of the iteration, it returns
        ``(model, prior_logit, v0, v_inf, change)`` for the next iteration, ``change`` in the units of ``tol``
        (the run converges when sites and hyper-parameters both stop moving).
    schedule : {"decay", "adaptive"}
        "decay" (the paper's): the damping starts at ``damping`` and is multiplied by ``damping_decay`` after
        every iteration; the run stops when the damped change is below ``tol``. "adaptive" (for warm starts):
        the same, until the undamped change stalls (see ``STALL_WINDOW``); from then on the damping decays by
        ``COOL_DECAY`` per iteration. The stopping rule and the convergence test are the same for both.

    Raises
    ------
    ValueError
        If the posterior cannot be factorised at the starting sites.
    """
    G = prior_logit.shape[0]

    def group_logit_of(s: EPSites) -> np.ndarray:
        return prior_logit + np.bincount(coef_group, weights=s.logit, minlength=G)

    try:
        post = model.posterior(sites.var, sites.mean / sites.var)
    except np.linalg.LinAlgError as exc:
        raise ValueError(f"the posterior cannot be factorised at the start of EP ({exc}); X, y, v0 and noise_var "
                         "are numerically degenerate together") from None
    group_logit = group_logit_of(sites)
    group_prob = expit(group_logit)
    xi = damping
    stopped = False
    failure = None
    n_iter = 0
    change = residual = np.inf
    adaptive = schedule == "adaptive"
    residuals: list[float] = []
    cooling = False
    for n_iter in range(1, max_iter + 1):  # noqa: B007 (read after the loop)
        cav = _cavity(post, sites, group_logit[coef_group])
        new_sites = _damped(sites, _matched_sites(cav, v0, v_inf), cav.valid, xi)
        hyper_change = 0.0
        if adapt is not None:
            model, prior_logit, v0, v_inf, hyper_change = adapt(post, cav, group_prob, xi)
        step_weight = xi
        xi *= COOL_DECAY if cooling else damping_decay
        try:
            new_post = model.posterior(new_sites.var, new_sites.mean / new_sites.var)
        except np.linalg.LinAlgError as exc:  # rounding broke positive definiteness: keep the last posterior
            failure = f"the posterior lost positive definiteness at iteration {n_iter} ({exc})"
            break
        new_group_logit = group_logit_of(new_sites)
        new_group_prob = expit(new_group_logit)
        # Scale-free test: changes of the mean relative to the size of the largest coefficient, and
        # changes of the group probabilities (not their log-odds, which drift for groups surely on/off).
        size = np.sqrt(np.max(new_post.mean**2 + np.maximum(new_post.var, 0.0)))
        change = max(np.max(np.abs(new_post.mean - post.mean)) / size,
                     np.max(np.abs(new_group_prob - group_prob)), hyper_change)
        if not np.isfinite(change):  # keep the last finite posterior
            failure = f"non-finite posterior at iteration {n_iter}"
            break
        sites, post, group_logit, group_prob = new_sites, new_post, new_group_logit, new_group_prob
        # The change an undamped update would make: small at a fixed point, whatever the damping.
        residual = change / step_weight
        if change < tol:
            stopped = True
            break
        if adaptive and not cooling:
            residuals.append(residual)
            cooling = len(residuals) > STALL_WINDOW and \
                min(residuals[-STALL_WINDOW:]) > STALL_FACTOR * min(residuals[:-STALL_WINDOW])

    # The decaying damping ends every run eventually (its steps sum to damping / (1 - damping_decay)), so
    # stopping is not enough: the fit has converged only if the undamped update would barely move it.
    converged = stopped and failure is None and residual < RESIDUAL_FACTOR * tol
    snr = model.signal_to_noise(sites.var)
    ill_conditioned = snr if snr * np.finfo(float).eps > MAX_VARIANCE_ERROR else None
    cav = _cavity(post, sites, group_logit[coef_group])
    if ill_conditioned is not None or not np.all(cav.valid):  # not an EP fixed point to be trusted
        converged = False
    if failure is None and np.all(cav.valid):
        log_ev = _log_evidence(model, post, sites, cav, prior_logit, coef_group, v0)
    else:
        log_ev = float("nan")
    return _EPRun(sites=sites, post=post, group_prob=group_prob, cavity=cav, n_iter=n_iter, stopped=stopped,
                  residual=float(residual), change=float(change), failure=failure,
                  ill_conditioned=ill_conditioned, converged=converged, log_evidence=log_ev)


def _warn_unless_converged(name: str, run: _EPRun, tol: float, max_iter: int) -> None:
    """The ConvergenceWarnings of a fit, saying why it is not converged."""
    if run.ill_conditioned is not None:
        warnings.warn(f"{name}: ill-conditioned fit: site variance x |x_i|^2 / noise_var reaches "
                      f"{run.ill_conditioned:.3g}, so posterior variances may be off by more than "
                      f"{MAX_VARIANCE_ERROR:g} relative; the fit is marked not converged", ConvergenceWarning,
                      stacklevel=3)
    if run.failure is not None:
        warnings.warn(f"{name}: EP stopped: {run.failure}; the fit is not converged", ConvergenceWarning,
                      stacklevel=3)
    elif run.stopped and run.residual >= RESIDUAL_FACTOR * tol:
        warnings.warn(f"{name}: EP was stopped by the decaying damping after {run.n_iter} iterations, not at a "
                      f"fixed point (an undamped update would still change the fit by {run.residual:.3g} > "
                      f"{RESIDUAL_FACTOR:g} tol)", ConvergenceWarning, stacklevel=3)
    elif not run.stopped:
        warnings.warn(f"{name}: EP did not converge in {max_iter} iterations (last change {run.change:.3g} > "
                      f"tol={tol})", ConvergenceWarning, stacklevel=3)
    if run.failure is None and not np.all(run.cavity.valid):
        warnings.warn(f"{name}: {np.count_nonzero(~run.cavity.valid)} site(s) have no valid cavity at the end of EP "
                      "(posterior variances lost to rounding); log_evidence_ is NaN and the fit is marked not "
                      "converged", ConvergenceWarning, stacklevel=3)


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
        Convergence threshold, scale-free: the largest change of the posterior mean between two iterations,
        in units of ``max_j sqrt(m_j^2 + V_jj)`` (the size of the largest coefficient), and the largest
        change of a group probability, must both fall below ``tol``.
    max_iter : int
        Iteration cap; reaching it sets ``converged_ = False`` and warns.
    v_inf_ratio : float
        Where moment matching gives a non-positive site variance, the site gets the variance
        ``v_inf_ratio * v0`` (300 is the paper's v_inf = 100 at its v0 = 1/3). Relative to ``v0`` so that
        the fit does not depend on the units of X and y.
    warm_start : bool
        Start from the sites of the previous fit (same number of coefficients) instead of the prior; when
        learning by the evidence, also from the previously learned hyper-parameters (see Notes).
    warm_schedule : {"adaptive", "decay"}
        Damping of warm-started fits. "decay": the cold fit's schedule (the paper's): start at ``damping``,
        multiply by ``damping_decay`` every iteration; a refit whose iterates circle the fixed point (parallel
        EP oscillates slowly after some new rows) ends only once the damping has shrunk, after ~500 iterations
        and usually short of the fixed point. "adaptive" (the default): the same until the undamped change stops
        shrinking for 30 iterations, then a fast decay (0.85 per iteration) ends the refit in tens of iterations.
        Both stop and test convergence the same way; cold fits always use "decay".
    learn : tuple of {"p0", "v0", "noise_var"}
        Hyper-parameters to learn from the measurements instead of taking them as given (the given values are
        the starting point). ``()``, the default, uses the given values as they are. With one ``p0`` per group,
        the offsets between groups are kept and their common level is learned.
    learn_method : {"evidence", "cv"}
        Type-II maximum likelihood (a coarse search over p0 and the noise variance with v0 tied to the data,
        refined by EP iterations that also take EM-like steps of the hyper-parameters) or K-fold
        cross-validation of the held-out squared error on the spec's 6 x 4 grid. See
        ``shared/spec/LEARNING-HYPERPARAMETERS.md``.
    cv : int
        Number of folds for ``learn_method="cv"``.
    restart_every : int
        With ``warm_start`` and evidence learning, every this many warm refits also learns from scratch (grid
        and refinement) and keeps whichever has the larger evidence: the evidence can have several modes at
        few rows, and the warm path can stay in the wrong one.

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
        True when EP stopped (change below ``tol``) at a fixed point: the change an undamped update would
        make, ``fixed_point_residual_``, is below ``10 tol``. A run ended by the decaying damping before it
        reached a fixed point, or by ``max_iter``, is not converged (and warns).
    fixed_point_residual_ : float
        The last change divided by the damping used for it (same units as ``tol``).
    sites_ : EPSites
        The fitted sites, in the units of the coefficients (used by ``warm_start``).
    p0_, v0_, noise_var_ : float (p0_: or ndarray of shape (G,), as ``p0`` was given)
        The hyper-parameters of the fit: learned ones, or the given ones.
    n_ep_fits_ : int
        EP runs done by this fit (1 without learning).
    learn_converged_ : bool
        Whether the learning ended because the hyper-parameters stopped moving (True without learning); in
        a warm refit, whether one more EM-like step from them at this fit would move them by less than 2 %
        (see Notes). ``converged_`` requires it.

    Notes
    -----
    The fit is equivariant to the units of the data: X and y are divided internally by powers of two
    (exactly) so that they are of unit size, and the convergence test and the clamped site variance are
    relative, so fitting ``(c X, y)`` with ``v0 / c^2`` gives the coefficients of ``(X, y)`` with ``v0``
    divided by ``c``, for any c within the floating-point range.

    With ``warm_start`` and evidence learning (sequential design) the hyper-parameters are tracked: each refit
    starts from the last one's values and sites and takes at most 30 joint iterations of sites and EM-like
    steps; the values go on moving at the next refit. Every ``restart_every`` refits a coarse search from
    scratch competes on the evidence.
    """

    def __init__(self, groups, p0=0.5, v0=1.0, noise_var=1.0, *, damping=0.9, damping_decay=0.99, tol=1e-4,
                 max_iter=1000, v_inf_ratio=300.0, warm_start=False, warm_schedule="adaptive", learn=(),
                 learn_method="evidence", cv=5, restart_every=4):
        self.groups = groups
        self.p0 = p0
        self.v0 = v0
        self.noise_var = noise_var
        self.damping = damping
        self.damping_decay = damping_decay
        self.tol = tol
        self.max_iter = max_iter
        self.v_inf_ratio = v_inf_ratio
        self.warm_start = warm_start
        self.warm_schedule = warm_schedule
        self.learn = learn
        self.learn_method = learn_method
        self.cv = cv
        self.restart_every = restart_every

    def _resolve_groups(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted distinct labels (G,) and the group index of each coefficient (d,)."""
        return val.check_groups(self.groups, d)

    def _check_hyperparameters(self) -> dict:
        """Every parameter but the group labels, validated without data (ValueError naming a bad one)."""
        return {"p0": val.check_probability(self.p0, None, "p0"), "v0": val.check_positive_scalar(self.v0, "v0"),
                "noise_var": val.check_positive_scalar(self.noise_var, "noise_var"),
                "damping": val.check_fraction(self.damping, "damping"),
                "damping_decay": val.check_fraction(self.damping_decay, "damping_decay"),
                "tol": val.check_positive_scalar(self.tol, "tol"),
                "max_iter": val.check_count(self.max_iter, "max_iter"),
                "v_inf_ratio": val.check_positive_scalar(self.v_inf_ratio, "v_inf_ratio"),
                "warm_start": val.check_bool(self.warm_start, "warm_start"),
                "warm_schedule": val.check_choice(self.warm_schedule, SCHEDULES, "warm_schedule"),
                "learn": self._check_learn(),
                "learn_method": val.check_choice(self.learn_method, LEARN_METHODS, "learn_method"),
                "cv": val.check_count(self.cv, "cv", minimum=2),
                "restart_every": val.check_count(self.restart_every, "restart_every")}

    def _check_learn(self) -> tuple[str, ...]:
        return val.check_names(self.learn, LEARNABLE, "learn")

    def _check_params(self, d: int):
        params = self._check_hyperparameters()
        labels, coef_group = self._resolve_groups(d)
        p0 = val.check_probability(self.p0, labels.shape[0], "p0")
        return labels, coef_group, p0, params["v0"], params["noise_var"]

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
        # Work on data of unit size (exact power-of-two rescaling); see the class Notes.
        scale = DataScale.of(X, y)
        unit, unit2 = scale.coef, scale.coef2
        v0_s = scale.scaled_variance(v0, "v0")
        v_inf = float(self.v_inf_ratio) * v0_s

        warm = self.warm_start and hasattr(self, "sites_")
        if warm:
            if self.sites_.var.shape[0] != d:
                raise ValueError(f"warm_start: the previous fit had {self.sites_.var.shape[0]} coefficients, "
                                 f"X has {d} columns")
            sites = EPSites(self.sites_.var / unit2, self.sites_.mean / unit, self.sites_.logit.copy())
        else:
            sites = EPSites.initial(p0[coef_group], v0_s)

        model = LinearGaussianModel(X / scale.x, y / scale.y, scale.scaled_noise(noise_var))
        prior_snr = model.signal_to_noise(np.full(d, v0_s))
        if not 1.0 / MAX_SIGNAL_TO_NOISE < prior_snr < MAX_SIGNAL_TO_NOISE:
            raise ValueError(f"{type(self).__name__}: v0 * |x_i|^2 / noise_var = {prior_snr:.3g} for the most "
                             f"informative row, outside what double precision can resolve "
                             f"({1 / MAX_SIGNAL_TO_NOISE:.0e} to {MAX_SIGNAL_TO_NOISE:.0e}); v0 or noise_var is "
                             "probably in the wrong units")

        learn = self._check_learn()
        if learn:
            run, (level, offsets, v0_s, noise_s), n_fits, learn_ok = self._learn(model, sites, p0, coef_group, v0_s,
                                                                                  scale, learn)
            p0_fit = expit(level + offsets) if "p0" in learn else p0
            v0, noise_var = v0_s * unit2, noise_s * scale.y**2
        else:
            try:
                run = _run_ep(model, sites, prior_logit, coef_group, v0_s, v_inf, damping=float(self.damping),
                              damping_decay=float(self.damping_decay), tol=float(self.tol),
                              max_iter=int(self.max_iter), schedule=self.warm_schedule if warm else "decay")
            except ValueError as exc:
                raise ValueError(f"{type(self).__name__}: {exc}") from None
            p0_fit, n_fits, learn_ok = p0, 1, True
        _warn_unless_converged(type(self).__name__, run, self.tol, self.max_iter)
        log_ev = run.log_evidence - model.n * np.log(scale.y)

        self.n_features_in_ = d
        self.group_labels_ = labels
        self.sites_ = EPSites(run.sites.var * unit2, run.sites.mean * unit, run.sites.logit)
        self.coef_ = run.post.mean * unit
        self.coef_var_ = run.post.var * unit2
        self.group_prob_ = run.group_prob
        self.log_evidence_ = log_ev
        self.n_iter_ = run.n_iter
        self.converged_ = run.converged and learn_ok
        self.fixed_point_residual_ = float(run.residual)
        self.p0_ = float(p0_fit[0]) if np.ndim(self.p0) == 0 else p0_fit
        self.v0_ = float(v0)
        self.noise_var_ = float(noise_var)
        self.n_ep_fits_ = n_fits
        self.learn_converged_ = learn_ok
        self._posterior = run.post
        self._cov_unit = unit2
        self._noise_var = noise_var
        return self

    def _learn(self, model, sites, p0, coef_group, v0_s, scale, learn):
        """Learn the hyper-parameters in ``learn`` (on unit-size data) and run EP at them.

        Returns the final EP run, (level, offsets, v0, noise variance) on unit-size data, the number of EP runs
        and whether the learning converged.
        """
        from adaptcs.models import _ep_learning as lrn

        name = type(self).__name__
        # p0_g = expit(level + offsets_g): the level is learned, the offsets (prior knowledge) are kept.
        level = float(logit(np.mean(p0)))
        offsets = logit(p0) - level if np.ndim(self.p0) else np.zeros_like(p0)
        problem = lrn.EPProblem(model.X, model.y, coef_group, offsets, v_inf_ratio=float(self.v_inf_ratio),
                                damping=float(self.damping), damping_decay=float(self.damping_decay))
        start = lrn.Hyper(level, v0_s, model.noise_var)
        warm = (self.warm_start and self.learn_method == "evidence" and hasattr(self, "_learned")
                and self._learned["d"] == model.d and self._learned["learn"] == learn)
        try:
            if self.learn_method == "cv":
                learned = lrn.learn_cv(problem, start, learn, int(self.cv))
                n_fits = learned.n_ep_fits
            elif warm:  # sequential design: from the last fit's values and sites, a full restart now and then
                prev = self._learned
                start = lrn.Hyper(prev["level"], scale.scaled_variance(prev["v0"], "v0"),
                                  scale.scaled_noise(prev["noise_var"]))
                self._learned["refits"] += 1
                learned = lrn.learn_warm(problem, start, sites, learn)
                n_fits = 0 if learned is None else learned.n_ep_fits
                if learned is None or self._learned["refits"] % int(self.restart_every) == 0:
                    fresh = lrn.learn_evidence(problem, start, learn, lrn.WARM_EP)
                    n_fits += fresh.n_ep_fits
                    if learned is None or fresh.run.log_evidence > learned.run.log_evidence:
                        learned = fresh
            else:
                learned = lrn.learn_evidence(problem, start, learn)
                n_fits = learned.n_ep_fits
        except ValueError as exc:
            raise ValueError(f"{name}: learning {', '.join(learn)}: {exc}") from None
        hyper = learned.hyper
        run = problem.run(hyper, learned.run.sites, tol=float(self.tol), max_iter=int(self.max_iter))
        if run is None:  # cannot happen at a point where EP just ran; kept as a clear error
            raise ValueError(f"{name}: the posterior cannot be factorised at the learned hyper-parameters")
        converged, message = learned.converged, learned.message
        if warm:  # theta is tracked from row to row: learned when it is (nearly) its own EM update at this fit
            step = lrn.em_step(problem, hyper, run, learn) if run.failure is None and np.all(run.cavity.valid) \
                else np.inf
            converged = step < lrn.TRACK_TOL
            message = f"an EM-like step from the tracked values would still move them by {step:.3g} > " \
                      f"{lrn.TRACK_TOL:g} in log units"
        if not converged:
            warnings.warn(f"{name}: learning {', '.join(learn)} did not converge ({message}); the fit is "
                          "marked not converged", ConvergenceWarning, stacklevel=3)
        refits = self._learned["refits"] if warm else 0
        self._learned = {"d": model.d, "learn": learn, "level": hyper.level, "refits": refits,
                         "v0": hyper.v0 * scale.coef2, "noise_var": hyper.noise_var * scale.y**2}
        return run, (hyper.level, offsets, hyper.v0, hyper.noise_var), n_fits + 1, converged


class SpikeSlabEP(GroupSpikeSlabEP):
    """Spike-and-slab linear regression fitted by EP (the paper's SS-EP): one group per coefficient.

    Parameters are those of :class:`GroupSpikeSlabEP` without ``groups``; ``p0`` is a scalar or one value
    per coefficient. ``group_prob_`` (shape (d,)) holds each coefficient's posterior inclusion probability.
    """

    def __init__(self, p0=0.5, v0=1.0, noise_var=1.0, *, damping=0.9, damping_decay=0.99, tol=1e-4,
                 max_iter=1000, v_inf_ratio=300.0, warm_start=False, warm_schedule="adaptive", learn=(),
                 learn_method="evidence", cv=5, restart_every=4):
        super().__init__(None, p0, v0, noise_var, damping=damping, damping_decay=damping_decay, tol=tol,
                         max_iter=max_iter, v_inf_ratio=v_inf_ratio, warm_start=warm_start,
                         warm_schedule=warm_schedule, learn=learn, learn_method=learn_method, cv=cv,
                         restart_every=restart_every)

    def _resolve_groups(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        index = np.arange(d, dtype=np.intp)
        return index, index
