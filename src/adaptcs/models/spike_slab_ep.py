"""Group spike-and-slab linear regression fitted by expectation propagation (GSS-EP and SS-EP).

Model (Hernandez-Lobato, Hernandez-Lobato & Dupont, JMLR 2013; docs/model.md)::

    y | w ~ N(X w, s2 I),   z_g ~ Bernoulli(p0_g),
    w_g | z_g = 1 ~ N(0, v0 I),   w_g | z_g = 0 = 0.

EP approximates the posterior by ``N(w | m, V) prod_g Bernoulli(z_g | sigmoid(p_g))``. The likelihood and the
prior on ``z`` are kept exactly; the d prior factors are replaced by sites
``exp(-(w_j - mt_j)^2 / (2 vt_j)) Bernoulli(z_g(j) | sigmoid(pt_j))`` that are refined in parallel, with damping
in natural parameters. Each iteration costs one Cholesky factorisation (of an n x n matrix when n < d) that
serves means, variances and ``V v`` products; see :mod:`adaptcs.models._gaussian`.
"""

from __future__ import annotations

import logging
import time
import warnings

import numpy as np
from scipy.special import expit, logit
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning

from adaptcs import _validation as val
from adaptcs.models import _constraints as constraints
from adaptcs.models import _ep_learning as lrn
from adaptcs.models._ep import (
    LEARN_METHODS,
    LEARNABLE,
    MAX_SIGNAL_TO_NOISE,
    SCHEDULES,
    EPSites,
    _run_ep,
    _warn_unless_converged,
)
from adaptcs.models._gaussian import GaussianPosteriorMixin, LinearGaussianModel
from adaptcs.models._scaling import DataScale

log = logging.getLogger(__name__)


class GroupSpikeSlabEP(GaussianPosteriorMixin, RegressorMixin, BaseEstimator):
    """Group spike-and-slab linear regression fitted by EP (the paper's GSS-EP).

    Parameters
    ----------
    groups : array-like, shape (d,)
        Group label of each coefficient (any sortable labels; group g is the g-th label in sorted order).
    p0 : float or array-like of shape (G,)
        Prior probability that a group is active; one value per group (in sorted label order) encodes
        prior knowledge of likely groups. Strictly inside (0, 1). The default 0.5 assumes no sparsity: give
        the value you know or learn it (``learn``).
    v0 : float
        Slab variance: prior variance of each coefficient of an active group, in signal units squared. The
        default 1 suits signals of order one; give it or learn it.
    noise_var : float
        Noise variance ``sigma0^2``, in measurement units squared. The default 1 is a placeholder; give it or
        learn it. There is no intercept: remove any offset of ``y`` first (docs/model.md, section 1).
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
        cross-validation of the held-out squared error on a 6 x 4 grid. See
        docs/learning.md.
    cv : int
        Number of folds for ``learn_method="cv"``.
    restart_every : int
        With ``warm_start`` and evidence learning, every this many warm refits also learns from scratch (grid
        and refinement) and keeps whichever has the larger evidence: the evidence can have several modes at
        few rows, and the warm path can stay in the wrong one.
    verbose : int
        0: silent; 1: one log line per fit (iterations, converged, time, learned values); 2: also one every 25
        EP iterations. Lines go to the ``adaptcs`` logger at level INFO (``logging.basicConfig(level="INFO")``
        shows them; the workflow's job logs and the command line show INFO).

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

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    >>> from adaptcs.metrics import relative_error
    >>> p = make_e1_problem(experiment_rng("E1", 0, 0))  # 512 coefficients in 128 groups of 4, 64 rows
    >>> from adaptcs.models import GroupSpikeSlabEP
    >>> est = GroupSpikeSlabEP(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0).fit(p.X, p.y)
    >>> est.converged_, est.coef_.shape, est.group_prob_.shape
    (True, (512,), (128,))
    >>> relative_error(est.coef_, p.w_true) < 0.4
    True
    >>> est.cov_matvec(np.ones(512)).shape  # posterior covariance times a vector, never formed
    (512,)
    """

    _parameter_constraints = constraints.spike_slab(SCHEDULES, LEARN_METHODS)

    def __init__(self, groups=None, *, p0=0.5, v0=1.0, noise_var=1.0, damping=0.9, damping_decay=0.99, tol=1e-4,
                 max_iter=1000, v_inf_ratio=300.0, warm_start=False, warm_schedule="adaptive", learn=(),
                 learn_method="evidence", cv=5, restart_every=4, verbose=0):
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
        self.verbose = verbose

    def _resolve_groups(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted distinct labels (G,) and the group index of each coefficient (d,)."""
        return val.check_groups(self.groups, d)

    def _check_hyperparameters(self) -> dict:
        """Every parameter but the group labels, validated without data (ValueError naming a bad one)."""
        self._validate_params()
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
        X, y = val.check_fit_data(self, X, y)
        started = time.perf_counter()
        d = X.shape[1]
        labels, coef_group, p0, v0, noise_var = self._check_params(d)
        progress = self._progress()
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
                                                                                  scale, learn, progress)
            p0_fit = expit(level + offsets) if "p0" in learn else p0
            v0, noise_var = v0_s * unit2, noise_s * scale.y**2
        else:
            try:
                run = _run_ep(model, sites, prior_logit, coef_group, v0_s, v_inf, damping=float(self.damping),
                              damping_decay=float(self.damping_decay), tol=float(self.tol),
                              max_iter=int(self.max_iter), schedule=self.warm_schedule if warm else "decay",
                              progress=progress)
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
        if self.verbose:
            log.info("%s: n=%d rows, d=%d; %s after %d iterations%s in %.2f s; log evidence %.4g%s",
                     type(self).__name__, model.n, d, "converged" if self.converged_ else "NOT converged",
                     run.n_iter, f" (last of {n_fits} EP runs)" if n_fits > 1 else "", time.perf_counter() - started,
                     log_ev, f"; learned p0 {np.mean(self.p0_):.3g}, v0 {self.v0_:.3g}, noise variance "
                     f"{self.noise_var_:.3g}" if learn else "")
        return self

    def _progress(self):
        """The EP progress callback of ``verbose`` >= 2: a log line every 25 iterations (None otherwise)."""
        if int(self.verbose) < 2:
            return None
        name = type(self).__name__

        def progress(n_iter, change, residual, damping):
            if n_iter % 25 == 0:
                log.info("%s: EP iteration %d, change %.2e (tol %.0e), undamped %.2e, damping %.3f", name, n_iter,
                         change, float(self.tol), residual, damping)

        return progress

    def _learn(self, model, sites, p0, coef_group, v0_s, scale, learn, progress=None):
        """Learn the hyper-parameters in ``learn`` (on unit-size data) and run EP at them.

        Returns the final EP run, (level, offsets, v0, noise variance) on unit-size data, the number of EP runs
        and whether the learning converged.
        """
        name = type(self).__name__
        # p0_g = expit(level + offsets_g): the level is learned, the offsets (prior knowledge) are kept.
        level = float(logit(np.mean(p0)))
        offsets = logit(p0) - level if np.ndim(self.p0) else np.zeros_like(p0)
        problem = lrn.EPProblem(model.X, model.y, coef_group, offsets, v_inf_ratio=float(self.v_inf_ratio),
                                damping=float(self.damping), damping_decay=float(self.damping_decay),
                                progress=progress)
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

    Parameters
    ----------
    p0 : float or array-like of shape (d,)
        Prior probability that a coefficient is non-zero (default 0.5: no sparsity assumed; give it or learn it).
    v0 : float
        Slab variance, in signal units squared.
    noise_var : float
        Variance of the measurement noise, in measurement units squared.
    **options
        Every keyword option of :class:`GroupSpikeSlabEP` (``tol``, ``learn``, ``warm_start``, ...).

    Attributes
    ----------
    Those of :class:`GroupSpikeSlabEP`; ``group_prob_`` (shape (d,)) holds each coefficient's posterior
    inclusion probability.

    Examples
    --------
    >>> from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    >>> p = make_e1_problem(experiment_rng("E1", 0, 0))  # 512 coefficients in 128 groups of 4, 64 rows
    >>> from adaptcs.models import SpikeSlabEP
    >>> est = SpikeSlabEP(p0=16 / 512, v0=1 / 3, noise_var=1.0).fit(p.X, p.y)
    >>> est.coef_.shape, est.group_prob_.shape  # one group per coefficient
    ((512,), (512,))
    """

    _parameter_constraints = constraints.without_groups(GroupSpikeSlabEP._parameter_constraints)

    def __init__(self, *, p0=0.5, v0=1.0, noise_var=1.0, damping=0.9, damping_decay=0.99, tol=1e-4,
                 max_iter=1000, v_inf_ratio=300.0, warm_start=False, warm_schedule="adaptive", learn=(),
                 learn_method="evidence", cv=5, restart_every=4, verbose=0):
        super().__init__(None, p0=p0, v0=v0, noise_var=noise_var, damping=damping, damping_decay=damping_decay, tol=tol,
                         max_iter=max_iter, v_inf_ratio=v_inf_ratio, warm_start=warm_start,
                         warm_schedule=warm_schedule, learn=learn, learn_method=learn_method, cv=cv,
                         restart_every=restart_every, verbose=verbose)

    def _resolve_groups(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        index = np.arange(d, dtype=np.intp)
        return index, index
