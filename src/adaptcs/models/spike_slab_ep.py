"""Group spike-and-slab linear regression fitted by expectation propagation (GSS-EP and SS-EP).

Model (Hernandez-Lobato, Hernandez-Lobato & Dupont, JMLR 2013; docs/model.md)::

    y | w ~ N(X w, s2 I),   z_g ~ Bernoulli(p0_g),
    w_g | z_g = 1 ~ N(0, v0 I),   w_g | z_g = 0 = 0.

EP approximates the posterior by ``N(w | m, V) prod_g Bernoulli(z_g | sigmoid(p_g))``. The likelihood and the
prior on ``z`` are kept exactly; the d prior factors are replaced by sites
``exp(-(w_j - mt_j)^2 / (2 vt_j)) Bernoulli(z_g(j) | sigmoid(pt_j))`` that are refined in parallel, with damping
in natural parameters. Each iteration costs one Cholesky factorisation (of an n x n matrix when n < d) that
serves means, variances and ``V v`` products; see :mod:`adaptcs.models._gaussian`.

Over 500 lines: the two estimators (GSS-EP and SS-EP) with their parameter documentation (most of the module)
and their fitted attributes; the algorithm itself is in :mod:`adaptcs.models._ep` and
:mod:`adaptcs.models._ep_learning`.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import replace

import numpy as np
from scipy.special import expit
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from adaptcs import _validation as val
from adaptcs.models import _constraints as constraints
from adaptcs.models import _ep_learning as lrn
from adaptcs.models import _ep_prior as ep_prior
from adaptcs.models._base import GroupRegressor
from adaptcs.models._ep import (
    LEARN_METHODS,
    LEARNABLE,
    MAX_SIGNAL_TO_NOISE,
    SCHEDULES,
    EPProblem,
    EPSites,
    Hyper,
    not_converged_reasons,
    warn_not_converged,
)
from adaptcs.models._ep_fallback import stable_ep
from adaptcs.models._ep_learning import WarmStart
from adaptcs.models._gaussian import GaussianPosteriorMixin
from adaptcs.models._hyperprior import Hyperprior
from adaptcs.models._scaling import UNINFORMED_P0, DataScale, uninformed_scale

log = logging.getLogger(__name__)


class GroupSpikeSlabEP(GaussianPosteriorMixin, GroupRegressor):
    """Group spike-and-slab linear regression fitted by EP (the paper's GSS-EP).

    Parameters
    ----------
    groups : array-like, shape (d,)
        Group label of each coefficient (any sortable labels; group g is the g-th label in sorted order).
    p0 : float or array-like of shape (G,) or (S,)
        Prior probability that a group is active; one value per group (in sorted label order) encodes
        prior knowledge of likely groups; with ``scales``, one value per scale label (sorted; label 0's is not
        used: it is always on). Strictly inside (0, 1). None (the default): learned from the measurements (type-II
        maximum likelihood, starting from 1/2).
    v0 : float or array-like of shape (S,)
        Slab variance: prior variance of each coefficient of an active group, in signal units squared; with
        ``scales``, one value or one per scale label. None (the default): learned from the measurements.
    scales : array-like of int, shape (d,), optional
        A prior per scale (docs/model.md, "Priors per scale"): one non-negative integer label per coefficient,
        the same within a group, e.g. ``basis.scales()`` of a wavelet basis. Every label has its own spike
        probability and slab variance; label 0 (the approximation) is always on (a Gaussian prior). None (the
        default): one p0 (or one per group) and one v0 for all coefficients.
    scale_learning : {"each", "profile"}
        With ``scales`` and ``learn``: "each" learns one p0 and one v0 per label (type-II ML); "profile" keeps the
        given per-label values as a profile and learns a common level of the log-odds and a common multiplier of
        the slab variances (with ``parents``: of the slab variances only).
    parents : array-like of int, shape (d,), optional
        A tree over the scales (docs/model.md, "A tree over the scales"; needs ``scales``): the parent coefficient
        of every coefficient, -1 for none, e.g. ``basis.parents()`` of a wavelet basis. The coefficients of a group
        must have their parents in one group, the parent group. The groups' states are then a hidden Markov tree:
        a group is on with probability ``p0`` of its label when its parent group is on (or when it has no parent)
        and ``p0_off`` when it is off; EP keeps the tree exact, and ``learn=("p0", ...)`` learns both per label.
    p0_off : float or array-like of shape (S,), optional
        With ``parents``: the spike probability of a group whose parent group is off, one value or one per scale
        label; default ``p0`` (no dependence on the parent where learning starts).
    noise_var : float or None
        Noise variance ``sigma0^2``, in measurement units squared. None (the default): learned from the
        measurements. There is no intercept: remove any offset of ``y`` first (docs/model.md, section 1).
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
    fallback : bool
        Where the parallel update stalls ("adaptive") or its damping ends the run short of a fixed point, and the
        hyper-parameters are fixed, go on with the variance-decoupled EP of Seeger & Nickisch (2011) and, where
        that circles too, Anderson-accelerated EP, keeping the result only if one undamped update from it would
        change the fit by less than ``tol`` (docs/model.md, "The variance-decoupled fallback"). Its posteriors
        count in ``n_iter_``. False: the parallel schedule
        alone (the authors' algorithm).
    learn : tuple of {"p0", "v0", "noise_var"}
        Hyper-parameters to learn from the measurements although they are given (the given values are then the
        starting point). Those left None are learned in any case; ``()``, the default, learns nothing else: a
        value given is used as it is. Learning costs about 10 fits without it (docs/learning.md). With one
        ``p0`` per group, the offsets between groups are kept and their common level is learned.
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
    hyperprior : "auto", None or Hyperprior
        Weak priors on the learned values (type-II MAP; docs/learning.md, "Weak priors on the learned values").
        None: learning maximises the evidence itself (type-II ML, the paper's protocol). A
        :class:`~adaptcs.models.Hyperprior`: its centres and spread (e.g. ``Hyperprior(noise_var=0.01)`` for an
        instrument whose noise variance is known roughly). "auto" (the default): ML in a single fit; in a design
        loop (:class:`adaptcs.design.SequentialDesigner`) weak priors centred on what was learned at the end of the
        random start (:meth:`centred_hyperprior`), so that a loop in mid course cannot explain its data as noise.
    blas_threads : int or None
        BLAS threads of the fit (threadpoolctl; restored afterwards). 1, the default: more threads cost 2-3x the CPU
        time of a fit, and on a machine busy with other work (or at n = 512, d = 4096 even on an idle one) also more
        wall time (docs/log/speed.md, "BLAS threads"). None: whatever the process has.
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
    n_clamped_sites_ : int
        Sites whose moment-matched variance is not positive at the end, so EP keeps them at ``v_inf * v0`` with
        their mean matched (the paper's rule). Where it is not 0, the fixed point matches those sites' first
        moments only: ``log_evidence_`` is not stationary in the sites, and learned values are the fixed point
        of the EM-like steps, not exactly the evidence's maximum (docs/learning.md, "What the learned values
        are").
    sites_ : EPSites
        The fitted sites, in the units of the coefficients (``warm_state_.sites``).
    warm_state_ : WarmStart
        What the next fit starts from with ``warm_start``: the sites and, when learned, the hyper-parameters and
        the refits since the last search from scratch.
    p0_, v0_, noise_var_ : float (p0_: or ndarray of shape (G,), as ``p0`` was given)
        The hyper-parameters of the fit: learned ones, or the given ones. With ``scales``, ``p0_`` and ``v0_`` have
        one value per scale label (shape (S,), in the order of ``scale_labels_``; ``p0_`` is 1 for label 0). With
        ``parents``, ``p0_`` is the spike probability of a group whose parent is on.
    p0_off_ : ndarray, shape (S,)
        With ``parents``: the spike probability of a group whose parent is off, per scale label (1 for label 0).
    scale_labels_ : ndarray of int, shape (S,)
        With ``scales``: the distinct scale labels, sorted.
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

    _parameter_constraints = {
        "groups": constraints.GROUPS, "p0": [*constraints.PROBABILITY, None],
        "v0": [*constraints.POSITIVE_OR_ARRAY, None],
        "scales": [None, "array-like"], "scale_learning": [StrOptions(set(ep_prior.SCALE_LEARNING))],
        "parents": [None, "array-like"], "p0_off": [None, *constraints.PROBABILITY],
        "noise_var": constraints.POSITIVE_OR_NONE, "damping": constraints.FRACTION,
        "damping_decay": constraints.FRACTION,
        "tol": constraints.POSITIVE, "max_iter": constraints.COUNT, "v_inf_ratio": constraints.POSITIVE,
        "warm_start": constraints.BOOLEAN, "warm_schedule": [StrOptions(set(SCHEDULES))],
        "fallback": constraints.BOOLEAN,
        "learn": constraints.NAMES, "learn_method": [StrOptions(set(LEARN_METHODS))], "cv": constraints.FOLDS,
        "restart_every": constraints.COUNT, "hyperprior": [StrOptions({"auto"}), Hyperprior, None],
        "blas_threads": [*constraints.COUNT, None], "verbose": ["verbose"]}

    def __init__(self, groups=None, *, p0=None, v0=None, scales=None, scale_learning="each", parents=None,
                 p0_off=None, noise_var=None, damping=0.9, damping_decay=0.99, tol=1e-4, max_iter=1000,
                 v_inf_ratio=300.0, warm_start=False, warm_schedule="adaptive", fallback=True, learn=(),
                 learn_method="evidence", cv=5, restart_every=4, hyperprior="auto", blas_threads=1, verbose=0):
        self.groups = groups
        self.p0 = p0
        self.v0 = v0
        self.scales = scales
        self.scale_learning = scale_learning
        self.parents = parents
        self.p0_off = p0_off
        self.noise_var = noise_var
        self.damping = damping
        self.damping_decay = damping_decay
        self.tol = tol
        self.max_iter = max_iter
        self.v_inf_ratio = v_inf_ratio
        self.warm_start = warm_start
        self.warm_schedule = warm_schedule
        self.fallback = fallback
        self.learn = learn
        self.learn_method = learn_method
        self.cv = cv
        self.restart_every = restart_every
        self.hyperprior = hyperprior
        self.blas_threads = blas_threads
        self.verbose = verbose

    def _check_extra(self, n_groups: int | None = None) -> None:
        """One ``p0`` per group (or one for all), each inside (0, 1), or with ``scales`` one ``p0`` and ``v0`` per
        scale label; names in ``learn``."""
        if self.scales is None:
            if self.p0 is not None:
                val.check_probability(self.p0, n_groups, "p0")
            if self.v0 is not None and np.ndim(self.v0) != 0:
                raise ValueError("v0 must be one value unless scales are given (one v0 per scale label)")
            if self.parents is not None:
                raise ValueError("parents need scales: the tree's transition probabilities are per scale label")
        else:
            n_scales = ep_prior.check_scales(self.scales)[0].shape[0]
            if self.p0 is not None:
                val.check_probability(self.p0, n_scales, "p0 (one per scale label)")
            if self.v0 is not None:
                ep_prior.check_per_scale(self.v0, n_scales, "v0")
            if self.p0_off is not None:
                val.check_probability(self.p0_off, n_scales, "p0_off (one per scale label)")
        if self.p0_off is not None and self.parents is None:
            raise ValueError("p0_off is the spike probability of a group whose parent is off: it needs parents")
        self._learned_names()

    def _learned_names(self) -> tuple[str, ...]:
        """What is learned: the names in ``learn`` (one may be given as a string) and every hyper-parameter left
        None."""
        named = val.check_names(self.learn, LEARNABLE, "learn")
        missing = tuple(name for name in LEARNABLE if getattr(self, name) is None and name not in named)
        return named + missing

    def _given_or_start(self, X: np.ndarray, y: np.ndarray) -> tuple:
        """``(p0, v0, noise_var)``: the given values, and for those left None where learning starts (p0 = 1/2, the
        noise variance a tenth of ``mean(y^2)``, v0 explaining the rest: docs/learning.md)."""
        if self.p0 is not None and self.v0 is not None and self.noise_var is not None:
            return self.p0, self.v0, self.noise_var
        v0, noise_var = uninformed_scale(X, y)
        return (UNINFORMED_P0 if self.p0 is None else self.p0, v0 if self.v0 is None else self.v0,
                noise_var if self.noise_var is None else self.noise_var)

    def _fit(self, X, y, labels, coef_group):
        """Run EP to convergence (or ``max_iter``)."""
        started = time.perf_counter()
        d = X.shape[1]
        name = type(self).__name__
        learn = self._learned_names()
        p0, v0, noise_var = self._given_or_start(X, y)
        prior = ep_prior.prior_classes(p0, v0, coef_group, labels.shape[0], scales=self.scales,
                                       scale_learning=self.scale_learning, learning=bool(learn),
                                       parents=self.parents, p0_off=self.p0_off)
        # Scaling on entry: EP works on data of unit size (an exact power-of-two rescaling; see the class Notes).
        scale = DataScale.of(X, y)
        warm = self._warm_state(d) if self.warm_start else None
        start = Hyper(prior.level, prior.v0, float(noise_var)).scaled(scale)
        problem = EPProblem(X / scale.x, y / scale.y, coef_group, prior.offsets, group_class=prior.group_class,
                            coef_slab=prior.coef_slab, slab_profile=prior.slab_profile, tree=prior.tree,
                            v_inf_ratio=float(self.v_inf_ratio), damping=float(self.damping),
                            damping_decay=float(self.damping_decay), progress=self._progress(),
                            hyperprior=self.hyperprior.scaled(scale) if isinstance(self.hyperprior, Hyperprior)
                            else None, fallback=stable_ep if self.fallback else None)
        if warm is not None:
            sites = EPSites(warm.sites.var / scale.coef2, warm.sites.mean / scale.coef, warm.sites.logit.copy())
        else:
            sites = EPSites.initial(prior.p0_group[coef_group], problem.slab_var(start))
        self._check_prior_scale(problem, start)
        tracked = warm is not None and warm.tracks(learn, self.learn_method, d) \
            and warm.hyper.phi().shape == start.phi().shape
        try:
            learned = lrn.infer(
                problem, start, sites, learn, tol=float(self.tol), max_iter=int(self.max_iter),
                schedule=self.warm_schedule if warm is not None else "decay", method=self.learn_method,
                cv=int(self.cv), warm=replace(warm, hyper=warm.hyper.scaled(scale)) if tracked else None,
                restart_every=int(self.restart_every), strict=warm is None or getattr(self, "_strict", False))
        except ValueError as exc:
            raise ValueError(f"{name}: {'learning ' + ', '.join(learn) + ': ' if learn else ''}{exc}") from None
        run = learned.run
        reasons = [] if learned.converged else [f"learning {', '.join(learn)} did not converge ({learned.message})"]
        warn_not_converged(name, reasons + not_converged_reasons(run, self.tol, self.max_iter), stacklevel=6)

        # Scaling on exit: everything back in the data's units.
        hyper = learned.hyper.unscaled(scale)
        self.n_features_in_ = d
        self.group_labels_ = labels
        self.warm_state_ = WarmStart(EPSites(run.sites.var * scale.coef2, run.sites.mean * scale.coef,
                                             run.sites.logit), hyper if learn else None, learn, learned.refits)
        self.coef_ = run.post.mean * scale.coef
        self.coef_var_ = run.post.var * scale.coef2
        self.group_prob_ = run.group_prob
        self.log_evidence_ = run.log_evidence - problem.n * np.log(scale.y)
        self.n_iter_ = run.n_iter
        self.converged_ = run.converged and learned.converged
        self.fixed_point_residual_ = float(run.residual)
        self.n_clamped_sites_ = run.n_clamped
        if self.scales is None:
            p0_fit = expit(problem.prior_logit(learned.hyper)) if "p0" in learn else prior.p0_group
            self.p0_ = float(p0_fit[0]) if np.ndim(p0) == 0 else p0_fit
            self.v0_ = float(hyper.v0[0])  # the given value when nothing is learned (power-of-two scaling is exact)
        elif prior.tree is not None:
            self.scale_labels_ = prior.scale_labels
            transitions = prior.transitions.copy()
            if "p0" in learn:
                transitions[:, prior.scale_labels != 0] = expit(learned.hyper.level).reshape(2, prior.tree.n_classes)
            self.p0_, self.p0_off_ = transitions
            self.v0_ = prior.per_scale(per_coef=problem.slab_var(hyper))
        else:
            self.scale_labels_ = prior.scale_labels
            self.p0_ = prior.per_scale(per_group=expit(problem.prior_logit(learned.hyper)))
            self.v0_ = prior.per_scale(per_coef=problem.slab_var(hyper))
        self.noise_var_ = float(hyper.noise_var)
        self.n_ep_fits_ = learned.n_ep_fits
        self.learn_converged_ = learned.converged
        self._posterior = run.post
        self._cov_unit = scale.coef2
        self._noise_var = self.noise_var_
        if self.verbose:
            log.info("%s: n=%d rows, d=%d; %s after %d iterations%s in %.2f s; log evidence %.4g%s", name,
                     problem.n, d, "converged" if self.converged_ else "NOT converged", run.n_iter,
                     f" (last of {learned.n_ep_fits} EP runs)" if learned.n_ep_fits > 1 else "",
                     time.perf_counter() - started, self.log_evidence_,
                     f"; learned p0 {np.mean(self.p0_):.3g}, v0 {np.mean(self.v0_):.3g}, noise variance "
                     f"{self.noise_var_:.3g}" if learn else "")
        return self

    def converge(self, X, y):
        """Take the last fit on to EP's fixed point: a warm refit on the same rows that does not stop short.

        A design loop's refits stop early where that only costs the choice of the next rows (the tracked learned
        values take at most 30 joint iterations; EP's damping decays). A fit that someone reads, a checkpoint or
        the loop's final fit, calls this: with learned values the joint run goes on to its fixed point and is
        checked like a fit from scratch, with given values EP restarts from its sites with fresh damping
        (:func:`adaptcs.models._ep_learning.strictly`). ``converged_`` says whether it got there; where it did not,
        the fit is left exactly as it stopped. A converged fit is returned as it is.

        Parameters
        ----------
        X : array-like, shape (n, d)
            The rows of the last fit.
        y : array-like, shape (n,)

        Returns
        -------
        self
        """
        check_is_fitted(self, "warm_state_")
        if self.converged_:
            return self
        stopped = copy.deepcopy(self.__dict__)
        warm_start, self._strict = self.warm_start, True
        try:
            self.warm_start = True
            self.fit(X, y)
        finally:
            self.warm_start, self._strict = warm_start, False
        if not self.converged_:  # no fixed point found: the fit stays as it stopped (not another stopped iterate)
            self.__dict__.update(stopped)
        return self

    def centred_hyperprior(self) -> Hyperprior | None:
        """Weak priors centred on the values this fit learned (what ``hyperprior="auto"`` becomes at the end of a
        design loop's random start); None if the fit learned nothing.

        The noise variance's centre is the learned value; without ``scales`` also p0's (the mean over the groups)
        and v0's. With ``scales`` or a tree only the noise variance gets a prior.
        """
        check_is_fitted(self, "warm_state_")
        learned = self.warm_state_.learn
        if not learned:
            return None
        plain = self.scales is None
        return Hyperprior(noise_var=self.noise_var_ if "noise_var" in learned else None,
                          p0=float(np.mean(self.p0_)) if plain and "p0" in learned else None,
                          v0=self.v0_ if plain and "v0" in learned else None)

    @property
    def sites_(self) -> EPSites:
        """The fitted sites, in the units of the coefficients (what ``warm_start`` starts from)."""
        check_is_fitted(self, "warm_state_")
        return self.warm_state_.sites

    def _warm_state(self, d: int) -> WarmStart | None:
        """The last fit's state, if there is one (ValueError if it had another number of coefficients)."""
        warm = getattr(self, "warm_state_", None)
        if warm is not None and warm.sites.var.shape[0] != d:
            raise ValueError(f"warm_start: the previous fit had {warm.sites.var.shape[0]} coefficients, X has {d} "
                             "columns")
        return warm

    def _check_prior_scale(self, problem: EPProblem, start: Hyper) -> None:
        """Refuse a prior signal-to-noise ratio that double precision cannot resolve (wrong units)."""
        prior_snr = problem.model(start.noise_var).signal_to_noise(problem.slab_var(start))
        if not 1.0 / MAX_SIGNAL_TO_NOISE < prior_snr < MAX_SIGNAL_TO_NOISE:
            raise ValueError(f"{type(self).__name__}: v0 * |x_i|^2 / noise_var = {prior_snr:.3g} for the most "
                             f"informative row, outside what double precision can resolve "
                             f"({1 / MAX_SIGNAL_TO_NOISE:.0e} to {MAX_SIGNAL_TO_NOISE:.0e}); v0 or noise_var is "
                             "probably in the wrong units")

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


class SpikeSlabEP(GroupSpikeSlabEP):
    """Spike-and-slab linear regression fitted by EP (the paper's SS-EP): one group per coefficient.

    Parameters
    ----------
    p0 : float or array-like of shape (d,) or (S,)
        Prior probability that a coefficient is non-zero; with ``scales``, one per scale label. None (the
        default): learned from the measurements.
    v0 : float or array-like of shape (S,)
        Slab variance, in signal units squared; with ``scales``, one value or one per scale label. None (the
        default): learned.
    scales, scale_learning, parents, p0_off
        As in :class:`GroupSpikeSlabEP` (every coefficient a group of its own: ``parents`` is then the tree of the
        coefficients themselves).
    noise_var : float
        Variance of the measurement noise, in measurement units squared. None (the default): learned.
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

    def __init__(self, *, p0=None, v0=None, scales=None, scale_learning="each", parents=None, p0_off=None,
                 noise_var=None, damping=0.9, damping_decay=0.99, tol=1e-4, max_iter=1000, v_inf_ratio=300.0,
                 warm_start=False, warm_schedule="adaptive", fallback=True, learn=(), learn_method="evidence", cv=5,
                 restart_every=4, hyperprior="auto", blas_threads=1, verbose=0):
        super().__init__(None, p0=p0, v0=v0, scales=scales, scale_learning=scale_learning, parents=parents,
                         p0_off=p0_off, noise_var=noise_var,
                         damping=damping, damping_decay=damping_decay, tol=tol,
                         max_iter=max_iter, v_inf_ratio=v_inf_ratio, warm_start=warm_start,
                         warm_schedule=warm_schedule, fallback=fallback, learn=learn, learn_method=learn_method,
                         cv=cv,
                         restart_every=restart_every, hyperprior=hyperprior, blas_threads=blas_threads,
                         verbose=verbose)

    def _resolve_groups(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        index = np.arange(d, dtype=np.intp)
        return index, index
