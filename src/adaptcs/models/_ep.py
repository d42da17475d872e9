"""Expectation propagation for the group spike-and-slab model: the sites, the hyper-parameters, the problem EP runs
on, one run of the iteration and its evidence.

Reading order: docs/model.md (the model and the updates, with the paper's misprints corrected); then
tests/reference_ep.py (a dense EP written for clarity, the ground truth the tests compare with); then this module
from top to bottom: the sites (:class:`EPSites`) and hyper-parameters (:class:`Hyper`), the problem
(:class:`EPProblem`: unit-size data, groups and EP settings), the pieces of one iteration (:func:`_cavity`,
:func:`_matched_sites`, :func:`_damped`), the loop (:func:`run_ep`) and the evidence (:func:`_log_evidence`). Then
:mod:`adaptcs.models._ep_learning`, whose :func:`~adaptcs.models._ep_learning.infer` is the one path of every fit
(a fit without learning is learning with ``learn=()``), and last :mod:`adaptcs.models.spike_slab_ep`, the
estimators, which scale the data once on entry and once on exit around it.

Over 500 lines: one algorithm read from top to bottom (sites, problem, one iteration, the loop, its evidence);
split, the reading order above would run across files. The fallback (variance-decoupled, then Anderson-accelerated
EP) is :mod:`adaptcs.models._ep_fallback`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, log_expit, logit
from sklearn.exceptions import ConvergenceWarning

from adaptcs.models._blocks import BlockGaussianModel, BlockRows
from adaptcs.models._gaussian import LinearGaussianModel, selected_columns
from adaptcs.models._hmt import TreeMarginals, TreePrior

_LOG_2PI = float(np.log(2.0 * np.pi))
# converged_ needs the undamped change below RESIDUAL_FACTOR * tol (the damped one is below tol when EP stops)
RESIDUAL_FACTOR = 10.0
# Refuse problems whose prior signal-to-noise ratio double precision cannot resolve at all; distrust fits whose
# variances may have lost MAX_VARIANCE_ERROR relative accuracy to cancellation (about eps * signal-to-noise).
MAX_SIGNAL_TO_NOISE = 1e20
MAX_VARIANCE_ERROR = 1e-3
# A column whose energy is below this fraction of the largest column's is one no row touches (a coefficient left
# out of a basis-aligned scan, up to the rounding of the transform): its site is the limit site (docs/model.md).
UNTOUCHED = 1e-20
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
    def initial(cls, p0_per_coef: np.ndarray, v0) -> EPSites:
        """Sites at the start of EP: ``vt = p0 v0`` (the prior's variance), ``mt = 0``, ``pt = 0``; ``v0`` one
        value or one per coefficient."""
        d = p0_per_coef.shape[0]
        return cls(var=p0_per_coef * v0, mean=np.zeros(d), logit=np.zeros(d))

    def copy(self) -> EPSites:
        """An independent copy of the sites."""
        return EPSites(self.var.copy(), self.mean.copy(), self.logit.copy())


@dataclass(frozen=True)
class Hyper:
    """The hyper-parameters of GSS-EP, travelling as one object (in the units of the data they belong to; EP
    works on unit-size data, :meth:`scaled` and :meth:`unscaled` convert).

    A prior with structure (a slab variance and a spike probability per wavelet scale, say) has several prior
    classes: the groups of class k have ``p0_g = expit(level_k + offset_g)`` and the coefficients of slab class
    l the slab variance ``v0_l r_j`` (:class:`EPProblem` holds the classes, the offsets and the profile ``r``).
    Without structure there is one class of each.

    Attributes
    ----------
    level : ndarray, shape (K_p,)
        Prior log-odds level of each prior class of groups.
    v0 : ndarray, shape (K_v,)
        Slab variance of each slab class of coefficients.
    noise_var : float
        Noise variance.
    """

    level: np.ndarray
    v0: np.ndarray
    noise_var: float

    def __post_init__(self):
        object.__setattr__(self, "level", np.atleast_1d(np.asarray(self.level, dtype=np.float64)))
        object.__setattr__(self, "v0", np.atleast_1d(np.asarray(self.v0, dtype=np.float64)))
        object.__setattr__(self, "noise_var", float(self.noise_var))

    def phi(self) -> np.ndarray:
        """The coordinates learning works in: (levels, log v0s, log s2), shape (K_p + K_v + 1,)."""
        return np.concatenate([self.level, np.log(self.v0), [np.log(self.noise_var)]])

    @classmethod
    def from_phi(cls, phi: np.ndarray, n_levels: int) -> Hyper:
        """The hyper-parameters at coordinates ``phi`` (:meth:`phi`) with ``n_levels`` prior classes."""
        return cls(phi[:n_levels], np.exp(phi[n_levels:-1]), float(np.exp(phi[-1])))

    def scaled(self, scale) -> Hyper:
        """On the unit-size data of ``scale`` (:class:`adaptcs.models._scaling.DataScale`)."""
        return Hyper(self.level, scale.scaled_variance(self.v0, "v0"), scale.scaled_noise(self.noise_var))

    def unscaled(self, scale) -> Hyper:
        """Back in the data's units from the unit-size data of ``scale``."""
        return Hyper(self.level, self.v0 * scale.coef2, self.noise_var * scale.y**2)


def class_sums(values: np.ndarray, classes: np.ndarray, n_classes: int) -> np.ndarray:
    """``sum(values[classes == k])`` for k < ``n_classes`` (entries of class -1 are left out), shape (n_classes,).

    Summed with :func:`numpy.sum` class by class (not ``bincount``), so one class gives exactly ``np.sum``."""
    return np.array([np.sum(values[classes == k]) for k in range(n_classes)])


class EPProblem:
    """Unit-size data, group structure, prior structure and EP settings: runs EP at any hyper-parameters.

    Parameters
    ----------
    X : ndarray, shape (n, d), or BlockRows
        The rows; :class:`adaptcs.models._blocks.BlockRows` (``diag(A_1, ..., A_B)``, e.g. k-space lines column by
        column) keeps the posterior block diagonal and exact at O(B r^2 b) per iteration.
    y : ndarray, shape (n,)
    coef_group : ndarray of int, shape (d,)
    offsets : ndarray, shape (G,)
        Fixed per-group prior log-odds: ``logit p0_g = level_k(g) + offsets_g`` (learning moves the levels only,
        so group-specific prior knowledge is kept).
    group_class : ndarray of int, shape (G,), optional
        Prior class of each group, 0..K_p-1, or -1 for a group that is always on (``p0 = 1``: a Gaussian prior,
        e.g. a wavelet approximation). Default: one class.
    coef_slab : ndarray of int, shape (d,), optional
        Slab class of each coefficient, 0..K_v-1. Default: one class.
    slab_profile : ndarray, shape (d,), optional
        Fixed factors ``r_j`` of the slab variances: coefficient j's is ``v0[coef_slab_j] r_j``. Default: ones.
    tree : TreePrior, optional
        A hidden Markov tree over the groups instead of independent groups: the levels are then the log-odds of
        its transition probabilities (:class:`adaptcs.models._hmt.TreePrior`), ``offsets`` must be zero and
        ``group_class`` is the tree's. The tree is kept exact in EP: the groups' posterior is the tree's with the
        sites as node potentials (docs/model.md, "A tree over the scales").
    v_inf_ratio, damping, damping_decay : float
        As in :class:`adaptcs.models.GroupSpikeSlabEP`.
    progress : callable, optional
        Passed to every EP run (see :func:`run_ep`).
    hyperprior : Hyperprior, optional
        Weak priors on the learned hyper-parameters, in the units of this (unit-size) data
        (:mod:`adaptcs.models._hyperprior`); None: learning maximises the evidence itself (type-II ML).
    fallback : callable, optional
        Where the parallel update stalls (adaptive schedule) or its damping ends a run short of a fixed point, and
        the hyper-parameters are fixed, go on with ``fallback(problem, hyper, sites, tol=tol)``, which returns an
        object with ``sites, post, groups, converged, change, n_posteriors``; its result is kept only where
        ``converged``. :func:`adaptcs.models._ep_fallback.stable_ep` (what the estimators pass) is the
        variance-decoupled EP, then Anderson-accelerated EP. None: the parallel schedule alone.
    active_set : bool
        With block-diagonal rows whose every group lies in one block, and hyper-parameters held fixed during the
        run: freeze a block once its own undamped change is below ``tol`` (it is then at its fixed point; nothing
        outside it moves it) and factorise only the blocks still moving (:func:`run_ep`). False: every block every
        iteration (a check).
    """

    def __init__(self, X, y, coef_group, offsets, *, group_class=None, coef_slab=None, slab_profile=None,
                 tree: TreePrior | None = None, v_inf_ratio: float, damping: float, damping_decay: float,
                 progress=None, hyperprior=None, fallback=None, active_set: bool = True):
        self.X, self.y, self.coef_group, self.offsets = X, y, coef_group, offsets
        self.fallback = fallback
        self.hyperprior = hyperprior
        G, d = offsets.shape[0], X.shape[1]
        self.blocks = X if isinstance(X, BlockRows) else None
        self.tree = tree
        # (G,) the block of every group, where block-diagonal rows have every group inside one block: at fixed
        # hyper-parameters the blocks are then independent EP problems, and a run factorises only those still moving
        self.group_block = _group_blocks(coef_group, self.blocks, G) if (
            active_set and self.blocks is not None and tree is None) else None
        if tree is not None:
            group_class = tree.group_class
        self.group_class = np.zeros(G, dtype=np.intp) if group_class is None else np.asarray(group_class, np.intp)
        self.coef_slab = np.zeros(d, dtype=np.intp) if coef_slab is None else np.asarray(coef_slab, np.intp)
        self.slab_profile = np.ones(d) if slab_profile is None else np.asarray(slab_profile, np.float64)
        self.n_levels = int(self.group_class.max(initial=-1)) + 1 if tree is None else tree.n_levels
        self.n_slabs = int(self.coef_slab.max(initial=-1)) + 1
        self.always_on = self.group_class < 0
        self.v_inf_ratio, self.damping, self.damping_decay = v_inf_ratio, damping, damping_decay
        self.progress = progress
        self.n = X.shape[0]
        self.mean_y2 = float(np.mean(y * y))
        # (d,): mean_i x_ij^2
        self._column_power = np.mean(X * X, axis=0) if self.blocks is None else self.blocks.column_power()
        self.untouched = self._column_power <= UNTOUCHED * np.max(self._column_power, initial=0.0)
        # rows that select coefficients (a subset of a basis): a diagonal posterior, O(n + d) per iteration
        self._selection = selected_columns(X) if self.blocks is None else None
        self._models: dict[float, LinearGaussianModel] = {}

    def rows(self, index: np.ndarray) -> EPProblem:
        """The same problem on a subset of the rows (dense rows only)."""
        if self.blocks is not None:
            raise ValueError("a subset of block-diagonal rows is not block diagonal; cross-validation needs dense rows")
        return EPProblem(self.X[index], self.y[index], self.coef_group, self.offsets, group_class=self.group_class,
                         coef_slab=self.coef_slab, slab_profile=self.slab_profile, tree=self.tree,
                         v_inf_ratio=self.v_inf_ratio,
                         damping=self.damping, damping_decay=self.damping_decay, progress=self.progress,
                         hyperprior=self.hyperprior, fallback=self.fallback)

    def fitted(self, coef: np.ndarray) -> np.ndarray:
        """``X coef``, shape (n,); O(n) when the rows select coefficients."""
        if self._selection is not None:
            columns, gains = self._selection
            return gains * coef[columns]
        if self.blocks is not None:
            return self.blocks.matvec(coef)
        return self.X @ coef

    def prior_logit(self, hyper: Hyper) -> np.ndarray:
        """Prior log-odds of every group at ``hyper``, shape (G,) (+inf for a group that is always on); with a tree,
        of its marginal under the tree."""
        if self.tree is not None:
            return self.tree.prior_logit(hyper.level)
        if not self.always_on.any():
            return hyper.level[self.group_class] + self.offsets
        logits = hyper.level[np.maximum(self.group_class, 0)] + self.offsets if self.n_levels else self.offsets
        return np.where(self.always_on, np.inf, logits)

    def slab_var(self, hyper: Hyper) -> np.ndarray:
        """The slab variance of every coefficient at ``hyper``, shape (d,)."""
        return hyper.v0[self.coef_slab] * self.slab_profile

    def mean_p0(self, level: float, k: int = 0) -> float:
        """Mean prior probability of the groups of prior class ``k`` at ``level``."""
        return float(np.mean(expit(level + self.offsets[self.group_class == k])))

    def level_for(self, mean_p0: float, k: int = 0) -> float:
        """The level of prior class ``k`` whose mean prior probability is ``mean_p0`` (monotone; exact without
        offsets)."""
        if not np.any(self.offsets[self.group_class == k]):
            return float(logit(mean_p0))
        return float(brentq(lambda lv: self.mean_p0(lv, k) - mean_p0, -60.0, 60.0, xtol=1e-12))

    def levels_for(self, mean_p0: float) -> np.ndarray:
        """Every prior class at the level whose mean prior probability is ``mean_p0``, shape (K_p,); with a tree,
        every transition probability ``mean_p0`` (independent groups)."""
        if self.tree is not None:
            return np.full(self.n_levels, float(logit(mean_p0)))
        return np.array([self.level_for(mean_p0, k) for k in range(self.n_levels)])

    def group_posterior(self, hyper: Hyper, sites: EPSites) -> GroupPosterior:
        """The groups' posterior given the sites' Bernoulli parts: independent groups, log-odds
        ``logit p0_g + sum_j pt_j``; with a tree, its marginals with node potentials ``prod_j sigmoid(+-pt_j)``."""
        G = self.offsets.shape[0]
        if self.tree is None:
            group_logit = self.prior_logit(hyper) + np.bincount(self.coef_group, weights=sites.logit, minlength=G)
            return GroupPosterior(group_logit, expit(group_logit))
        marginals = self.tree.marginals(hyper.level, _log_potentials(sites, self.coef_group, G))
        return GroupPosterior(marginals.logit, marginals.prob, marginals)

    def log_group_partition(self, hyper: Hyper, sites: EPSites) -> float:
        """``log sum_z P(z) prod_j Bernoulli(z_g(j) | sigmoid(pt_j))``: the prior on the groups times the sites'
        Bernoulli parts, summed over the states (a term of the evidence)."""
        G = self.offsets.shape[0]
        log_phi = _log_potentials(sites, self.coef_group, G)
        if self.tree is not None:
            return self.tree.marginals(hyper.level, log_phi).log_z
        prior_logit = self.prior_logit(hyper)
        return float(np.sum(np.logaddexp(log_expit(prior_logit) + log_phi[:, 1],
                                          log_expit(-prior_logit) + log_phi[:, 0])))

    def tied_v0(self, level, noise_var: float) -> np.ndarray:
        """Slab variances, one value for every slab class, that make the prior's mean y_i^2 equal the data's
        (docs/learning.md); shape (K_v,)."""
        prob = expit(self.prior_logit(Hyper(level, np.ones(self.n_slabs), noise_var)))[self.coef_group]
        signal = max(self.mean_y2 - noise_var, 1e-3 * self.mean_y2)
        return np.full(self.n_slabs, signal / float(self._column_power @ (prob * self.slab_profile)))

    def model(self, noise_var: float) -> LinearGaussianModel | BlockGaussianModel:
        """The Gaussian part of the model at noise variance ``noise_var`` (cached per value)."""
        if noise_var not in self._models:
            if len(self._models) > 64:
                self._models.clear()
            if self.blocks is not None:
                model = BlockGaussianModel(self.blocks, self.y, noise_var)
            else:
                model = LinearGaussianModel(self.X, self.y, noise_var, selection=self._selection,
                                            form="auto" if self._selection is None else "selection")
            self._models[noise_var] = model
        return self._models[noise_var]

    def run(self, hyper: Hyper, sites: EPSites | None = None, *, tol: float, max_iter: int, schedule: str = "decay",
            adapt=None) -> EPRun:
        """EP at ``hyper`` from ``sites`` (the prior's when None): :func:`run_ep`. ValueError if the posterior
        cannot be factorised at the start."""
        if sites is None:
            sites = EPSites.initial(expit(self.prior_logit(hyper))[self.coef_group], self.slab_var(hyper))
        return run_ep(self, hyper, sites, tol=tol, max_iter=max_iter, schedule=schedule, adapt=adapt)

    def try_run(self, hyper: Hyper, sites: EPSites | None = None, *, tol: float, max_iter: int) -> EPRun | None:
        """:meth:`run`, or None where the posterior cannot be factorised (a point of a search to skip)."""
        try:
            return self.run(hyper, sites, tol=tol, max_iter=max_iter)
        except ValueError:
            return None


def _log_potentials(sites: EPSites, coef_group: np.ndarray, n_groups: int) -> np.ndarray:
    """``sum_j log sigmoid(-pt_j)`` and ``sum_j log sigmoid(pt_j)`` over each group's sites, shape (G, 2)."""
    return np.stack([np.bincount(coef_group, weights=log_expit(-sites.logit), minlength=n_groups),
                     np.bincount(coef_group, weights=log_expit(sites.logit), minlength=n_groups)], axis=1)


@dataclass(frozen=True)
class GroupPosterior:
    """The groups' part of the EP posterior ``q(z)``.

    Attributes
    ----------
    logit : ndarray, shape (G,)
        ``log q(z_g = 1) - log q(z_g = 0)``.
    prob : ndarray, shape (G,)
        ``q(z_g = 1)``.
    tree : TreeMarginals or None
        With a tree prior, its marginals (the pairwise ones with the parent are what learning needs).
    """

    logit: np.ndarray
    prob: np.ndarray
    tree: TreeMarginals | None = None


def _log_normal_at_zero(mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """``log N(0 | mean, var)``, elementwise."""
    return -0.5 * (_LOG_2PI + np.log(var) + mean * mean / var)


@dataclass
class _Cavity:
    var: np.ndarray  # vc, shape (d,); only meaningful where ``valid`` (inf where ``limit``)
    mean: np.ndarray  # mc
    logit: np.ndarray  # pc
    valid: np.ndarray  # bool, cavity variance finite and positive
    limit: np.ndarray | None = None  # bool, a coefficient no row touches: a flat cavity (vc -> inf); None: none

    def __post_init__(self):
        if self.limit is None:
            self.limit = np.zeros_like(self.valid)

    @property
    def usable(self) -> np.ndarray:
        """Sites with a cavity EP can use: a valid one or the flat limit."""
        return self.valid | self.limit


def _cavity(post, sites: EPSites, coef_group_logit, limit: np.ndarray) -> _Cavity:
    """Remove each site from the posterior marginals (docs/model.md section 2); the coefficients in ``limit`` (no
    row touches them) get the flat cavity."""
    marg_mean, marg_var = post.mean, post.var
    # 1/V_jj - 1/vt_j, written so it does not cancel when V_jj is within rounding of vt_j.
    with np.errstate(divide="ignore", invalid="ignore"):  # a variance lost to rounding (0) gives no cavity
        cav_prec = post.var_reduction / (marg_var * sites.var)
    valid = (cav_prec > 0.0) & (marg_var > 0.0)
    safe_prec = np.where(valid, cav_prec, 1.0)
    var = 1.0 / safe_prec
    mean = var * (marg_mean / np.where(valid, marg_var, 1.0) - sites.mean / sites.var)
    valid &= np.isfinite(var) & np.isfinite(mean)
    if limit.any():
        valid &= ~limit
        var, mean = np.where(limit, np.inf, var), np.where(limit, 0.0, mean)
    return _Cavity(var=var, mean=mean, logit=coef_group_logit - sites.logit, valid=valid, limit=limit)


def _matched_sites(cav: _Cavity, v0: np.ndarray, v_inf: np.ndarray) -> EPSites:
    """Sites that match the moments of (exact spike-and-slab factor) x (cavity), for every j (slab variances
    ``v0`` and clamped variances ``v_inf``, shape (d,)).

    Where the matched site variance is not positive, it is set to ``v_inf`` and the site mean is chosen so
    the moment-matched posterior mean is kept: ``mt = mc - a (vt + vc)``. Where the cavity is flat (``limit``: no
    row touches the coefficient), the tilted distribution is the prior given the rest of the group, and the site
    its moments: ``vt = sigmoid(pc) v0``, ``mt = 0``, ``pt = 0`` (no information about the group).
    """
    if cav.limit.any():
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            matched = _matched_sites(_Cavity(np.where(cav.limit, 1.0, cav.var), cav.mean, cav.logit, cav.valid),
                                     v0, v_inf)
        lim = cav.limit
        return EPSites(var=np.where(lim, expit(cav.logit) * v0, matched.var), mean=np.where(lim, 0.0, matched.mean),
                       logit=np.where(lim, 0.0, matched.logit))
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


def _log_evidence(model: LinearGaussianModel, post, sites: EPSites, cav: _Cavity, log_groups: float,
                  v0: np.ndarray) -> float:
    """EP approximation of ``log p(y | X)`` (the paper's eq. 28; docs/model.md section 2), rearranged for accuracy.

    The Gaussian terms of eq. 28 (``log s1``, the sites' ``-1/2 log(2 pi vt) - mt^2 / (2 vt)``, ``d/2 log 2 pi``,
    ``1/2 log|V|`` and ``1/2 u^T V u``) add up to ``log N(y | X mt, K)``, ``K = s2 I + X diag(vt) X^T``. With
    little noise, ``y^T y / (2 s2)`` and ``u^T V u / 2`` are huge and cancel; here the quadratic form is taken
    as the minimum ``r^T K^{-1} r = |y - X m|^2 / s2 + sum_j (m_j - mt_j)^2 / vt_j`` (a sum of positive terms,
    first-order insensitive to rounding in m), and ``log|K|`` from the Cholesky factor. ``log_groups`` is the
    groups' term (:meth:`EPProblem.log_group_partition`).
    """
    vt, mt, pt = sites.var, sites.mean, sites.logit
    vc, mc, pc = cav.var, cav.mean, cav.logit
    m = post.mean
    resid = model.y - model.fitted(m)
    quad = float(resid @ resid) / model.noise_var + float(np.sum((m - mt) ** 2 / vt))
    log_gauss = -0.5 * (model.n * _LOG_2PI + post.log_det_marginal() + quad)
    if cav.limit.any():  # a flat cavity: the site's terms cancel but for -log_bern_norm (docs/model.md)
        vc, mc = np.where(cav.limit, 1.0, vc), np.where(cav.limit, 0.0, mc)
    log_kappa = np.logaddexp(log_expit(pc) + _log_normal_at_zero(mc, vc + v0),
                             log_expit(-pc) + _log_normal_at_zero(mc, vc))
    log_bern_norm = np.logaddexp(log_expit(pt) + log_expit(pc), log_expit(-pt) + log_expit(-pc))
    log_sites = log_kappa - log_bern_norm - _log_normal_at_zero(mc - mt, vt + vc)
    if cav.limit.any():
        log_sites = np.where(cav.limit, -log_bern_norm, log_sites)
    return float(log_gauss + np.sum(log_sites) + log_groups)


@dataclass
class EPRun:
    """The end of one EP run on unit-size data (see :func:`run_ep`)."""

    hyper: Hyper  # at the end of the run (learning moves them with the sites)
    sites: EPSites
    post: object  # WoodburyPosterior or DirectPosterior
    groups: GroupPosterior
    cavity: _Cavity  # at the final sites
    n_iter: int
    stopped: bool  # the damped change fell below tol (the paper's rule)
    residual: float  # the last change divided by its damping: small at a fixed point
    change: float
    failure: str | None  # why EP stopped early, if it did
    ill_conditioned: float | None  # the signal-to-noise ratio, when too large for accurate variances
    converged: bool
    log_evidence: float  # of the unit-size data; NaN when EP failed or some cavity is invalid
    n_clamped: int = 0  # sites whose matched variance at the final cavities is not positive (set to v_inf)
    n_fallback: int = 0  # posteriors spent in the variance-decoupled fallback (counted in n_iter too)

    @property
    def group_prob(self) -> np.ndarray:
        """``q(z_g = 1)``, shape (G,)."""
        return self.groups.prob


def fit_change(post, groups: GroupPosterior, new_post, new_groups: GroupPosterior) -> float:
    """EP's scale-free change between two iterates: of the mean relative to the size of the largest coefficient,
    and of the group probabilities (not their log-odds, which drift for groups surely on or off)."""
    size = np.sqrt(np.max(new_post.mean**2 + np.maximum(new_post.var, 0.0)))
    return float(max(np.max(np.abs(new_post.mean - post.mean)) / size,
                     np.max(np.abs(new_groups.prob - groups.prob))))


def _group_blocks(coef_group: np.ndarray, blocks: BlockRows, n_groups: int) -> np.ndarray | None:
    """The block of every group (shape (G,)), or None if some group spans two blocks."""
    block = np.arange(coef_group.shape[0]) // blocks.stacked.shape[2]
    low, high = np.full(n_groups, blocks.n_blocks), np.full(n_groups, -1)
    np.minimum.at(low, coef_group, block)
    np.maximum.at(high, coef_group, block)
    return low if np.array_equal(low, high) else None


class ActiveBlocks:
    """Which blocks of an EP problem still move, for the loops that freeze a block once its own change is below
    ``tol`` (:func:`run_ep`, :mod:`adaptcs.models._ep_decoupled`, :mod:`adaptcs.models._ep_anderson`).

    With independent blocks (``problem.group_block``: block-diagonal rows, every group inside one block) and
    ``blockwise``, each block is tracked apart and only the blocks still moving are factorised again; otherwise the
    whole problem is one block.

    Attributes
    ----------
    independent : bool
        The blocks are tracked apart (else one block).
    n_blocks : int
    coef_block : ndarray of int, shape (d,)
        The block of every coefficient.
    active : ndarray of bool, shape (n_blocks,)
        The blocks still moving.
    residual : ndarray, shape (n_blocks,)
        Each block's last recorded change (a frozen block keeps the one it was frozen with); ``inf`` before the
        first record.
    """

    def __init__(self, problem: EPProblem, *, blockwise: bool = True):
        self._problem = problem
        self.independent = blockwise and problem.group_block is not None
        self.n_blocks = problem.blocks.n_blocks if self.independent else 1
        self.active = np.ones(self.n_blocks, dtype=bool)
        self.residual = np.full(self.n_blocks, np.inf)
        d = problem.coef_group.shape[0]
        self.coef_block = np.arange(d) // (d // self.n_blocks)  # shape (d,)

    def moving(self) -> np.ndarray:
        """The coefficients whose sites may move, shape (d,) bool."""
        return self.active[self.coef_block]

    def posterior(self, model, hyper: Hyper, sites: EPSites, last=None, supersede: bool = False):
        """``(posterior, groups)`` at ``sites``; with ``last`` (the posterior of the sites before, which differ only
        in active blocks) the frozen blocks' factors are taken from it, not factorised again (``supersede``: the
        new posterior takes over ``last``'s factor, which must be given back by its ``undo`` if ``last`` is kept;
        :meth:`adaptcs.models._blocks.BlockPosterior.updated`)."""
        if last is not None and self.independent and not self.active.all():
            post = last.updated(model, sites.var, sites.mean / sites.var, self.active, supersede=supersede)
        else:
            post = model.posterior(sites.var, sites.mean / sites.var)
        return post, self._problem.group_posterior(hyper, sites)

    def changes(self, post, groups: GroupPosterior, new_post, new_groups: GroupPosterior) -> np.ndarray:
        """:func:`fit_change` of every block, shape (n_blocks,) (the largest is :func:`fit_change`)."""
        if not self.independent:
            return np.array([fit_change(post, groups, new_post, new_groups)])
        problem = self._problem
        size = np.sqrt(np.max(new_post.mean**2 + np.maximum(new_post.var, 0.0)))
        change = (np.abs(new_post.mean - post.mean) / size).reshape(problem.blocks.n_blocks, -1).max(axis=1)
        np.maximum.at(change, problem.group_block, np.abs(new_groups.prob - groups.prob))
        return change

    def record(self, residuals: np.ndarray, tol: float) -> float:
        """Take the active blocks' new ``residuals`` (shape (n_blocks,)), freeze those below ``tol``, and return
        the largest residual over all blocks."""
        self.residual[self.active] = residuals[self.active]
        self.active &= self.residual >= tol
        return float(np.max(self.residual))


def run_ep(problem: EPProblem, hyper: Hyper, sites: EPSites, *, tol: float, max_iter: int, schedule: str = "decay",
           adapt=None) -> EPRun:
    """Iterate EP from ``sites`` until the damped change is below ``tol`` or ``max_iter`` (no warnings).

    Parameters
    ----------
    problem : EPProblem
        Unit-size data, groups, damping and progress callback.
    hyper : Hyper
        Hyper-parameters on the unit-size data.
    sites : EPSites
        Starting sites, shape (d,) each.
    adapt : callable, optional
        Hyper-parameters that move with the sites (learning): called every iteration as
        ``adapt(hyper, post, cavity, groups, weight)`` (``groups`` a :class:`GroupPosterior`) with the damping
        ``weight`` of the iteration, it returns
        ``(hyper, change)``: the hyper-parameters of the next iteration and how far they moved, in the units of
        ``tol`` (the run converges when sites and hyper-parameters both stop moving).
    schedule : {"decay", "adaptive"}
        "decay" (the paper's): the damping starts at ``problem.damping`` and is multiplied by
        ``problem.damping_decay`` after every iteration; the run stops when the damped change is below ``tol``.
        "adaptive" (for warm starts): the same, until the undamped change stalls (see ``STALL_WINDOW``); from then
        on the damping decays by ``COOL_DECAY`` per iteration. The stopping rule and the convergence test are the
        same for both.

    With independent blocks (``problem.group_block``) and nothing learned during the run, a block whose undamped
    change falls below ``tol`` keeps its sites from then on and is not factorised again: the run's change is the
    largest over the blocks still moving, its residual the largest over all blocks' last ones.

    Raises
    ------
    ValueError
        If the posterior cannot be factorised at the starting sites.
    """
    coef_group, progress, damping_decay = problem.coef_group, problem.progress, problem.damping_decay
    model, v0, v_inf = _at(problem, hyper)
    try:
        post = model.posterior(sites.var, sites.mean / sites.var)
    except np.linalg.LinAlgError as exc:
        raise ValueError(f"the posterior cannot be factorised at the start of EP ({exc}); X, y, v0 and noise_var "
                         "are numerically degenerate together") from None
    groups = problem.group_posterior(hyper, sites)
    xi = problem.damping
    stopped = False
    failure = None
    n_iter = 0
    change = residual = np.inf
    adaptive = schedule == "adaptive"
    residuals: list[float] = []
    cooling = False
    n_fallback = 0  # posteriors spent in the variance-decoupled fallback
    blocks = ActiveBlocks(problem, blockwise=adapt is None)
    for n_iter in range(1, max_iter + 1):  # noqa: B007 (read after the loop)
        cav = _cavity(post, sites, groups.logit[coef_group], problem.untouched)
        new_sites = _damped(sites, _matched_sites(cav, v0, v_inf), cav.usable & blocks.moving(), xi)
        hyper_change = 0.0
        if adapt is not None:
            hyper, hyper_change = adapt(hyper, post, cav, groups, xi)
            model, v0, v_inf = _at(problem, hyper)
        step_weight = xi
        xi *= COOL_DECAY if cooling else damping_decay
        try:
            # the last posterior is dropped unless this one fails: this one takes over its factor (no copy)
            new_post, new_groups = blocks.posterior(model, hyper, new_sites, last=post, supersede=True)
        except np.linalg.LinAlgError as exc:  # rounding broke positive definiteness: keep the last posterior
            failure = f"the posterior lost positive definiteness at iteration {n_iter} ({exc})"
            break
        changes = np.maximum(blocks.changes(post, groups, new_post, new_groups), hyper_change)
        change = float(np.max(changes))
        if not np.isfinite(change):  # keep the last finite posterior
            if new_post is not post and getattr(new_post, "_undo", None) is not None:
                new_post.undo()
            failure = f"non-finite posterior at iteration {n_iter}"
            break
        sites, post, groups = new_sites, new_post, new_groups
        # The change an undamped update would make: small at a fixed point, whatever the damping. A frozen block
        # keeps the residual it was frozen with.
        residual = blocks.record(changes / step_weight, tol)
        if progress is not None:
            progress(n_iter, change, residual, step_weight)
        if change < tol:
            stopped = True
            break
        if adaptive and not cooling:
            residuals.append(residual)
            cooling = len(residuals) > STALL_WINDOW and \
                min(residuals[-STALL_WINDOW:]) > STALL_FACTOR * min(residuals[:-STALL_WINDOW])
            if cooling and adapt is None and problem.fallback is not None:
                found, n_fallback = _fallback(problem, hyper, sites, tol)
                if found is not None:
                    sites, post, groups, change, residual, stopped = *found, True
                    break
    # a run the damping ended short of a fixed point (not one that used up max_iter: that bound is the caller's)
    if adapt is None and problem.fallback is not None and not n_fallback and failure is None and stopped \
            and residual >= RESIDUAL_FACTOR * tol:
        found, n_fallback = _fallback(problem, hyper, sites, tol)
        if found is not None:
            sites, post, groups, change, residual, stopped = *found, True

    n_iter += n_fallback
    # The decaying damping ends every run eventually (its steps sum to damping / (1 - damping_decay)), so
    # stopping is not enough: the fit has converged only if the undamped update would barely move it.
    converged = stopped and failure is None and residual < RESIDUAL_FACTOR * tol
    snr = model.signal_to_noise(sites.var)
    ill_conditioned = snr if snr * np.finfo(float).eps > MAX_VARIANCE_ERROR else None
    cav = _cavity(post, sites, groups.logit[coef_group], problem.untouched)
    if ill_conditioned is not None or not np.all(cav.usable):  # not an EP fixed point to be trusted
        converged = False
    if failure is None and np.all(cav.usable):
        log_ev = _log_evidence(model, post, sites, cav, problem.log_group_partition(hyper, sites), v0)
    else:
        log_ev = float("nan")
    return EPRun(hyper=hyper, sites=sites, post=post, groups=groups, cavity=cav, n_iter=n_iter,
                 stopped=stopped, residual=float(residual), change=float(change), failure=failure,
                 ill_conditioned=ill_conditioned, converged=converged, log_evidence=log_ev,
                 n_clamped=_count_clamped(cav, v0, v_inf), n_fallback=n_fallback)


def _fallback(problem: EPProblem, hyper: Hyper, sites: EPSites, tol: float):
    """``problem.fallback`` from ``sites``: ``((sites, post, groups, change, residual), n_posteriors)`` if it
    passed its test, ``(None, n_posteriors)`` if not."""
    try:
        run = problem.fallback(problem, hyper, sites, tol=tol)
    except np.linalg.LinAlgError:
        return None, 1
    if not run.converged:
        return None, run.n_posteriors
    return (run.sites, run.post, run.groups, run.change, run.change), run.n_posteriors


def _count_clamped(cav: _Cavity, v0: np.ndarray, v_inf: np.ndarray) -> int:
    """How many sites with a valid cavity would be clamped at ``v_inf`` by a moment-matching update (their
    matched variance is not positive): where this is not 0 the site's second moment is not matched, the evidence is
    not stationary in the sites, and the EM-like updates of learning do not find its stationary points
    (docs/learning.md, "What the learned values are")."""
    if not cav.valid.any():
        return 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        matched = _matched_sites(cav, v0, v_inf)
    return int(np.count_nonzero(cav.valid & (matched.var == v_inf)))


def _at(problem: EPProblem, hyper: Hyper) -> tuple[LinearGaussianModel, np.ndarray, np.ndarray]:
    """What one iteration needs of ``hyper``: the Gaussian model and the slab and clamped variances of every
    coefficient."""
    v0 = problem.slab_var(hyper)
    return problem.model(hyper.noise_var), v0, problem.v_inf_ratio * v0


NOT_CONVERGED_ADVICE = (
    "The estimate is the last iterate, good to about that change. To converge: give the hyper-parameters you know, "
    "raise max_iter or measure more (docs/model.md, 'When a fit does not converge')")


def undamped_changes(problem: EPProblem, run: EPRun) -> tuple[np.ndarray, np.ndarray]:
    """What one undamped EP update from the end of ``run`` would change, per coefficient and per group: the terms
    of the fixed-point residual (``run.residual`` is their largest value when the run's last step was undamped).

    Costs one factorisation. Sites without a usable cavity are kept, as in :func:`run_ep`.

    Returns
    -------
    mean_change : ndarray, shape (d,)
        ``|m_new - m|`` relative to the size of the largest coefficient (the convergence test's scale).
    prob_change : ndarray, shape (G,)
        ``|q_new(z_g) - q(z_g)|``.
    """
    model, v0, v_inf = _at(problem, run.hyper)
    cav = run.cavity
    new_sites = _damped(run.sites, _matched_sites(cav, v0, v_inf), cav.usable, 1.0)
    new_post = model.posterior(new_sites.var, new_sites.mean / new_sites.var)
    new_groups = problem.group_posterior(run.hyper, new_sites)
    size = np.sqrt(np.max(new_post.mean**2 + np.maximum(new_post.var, 0.0)))
    return np.abs(new_post.mean - run.post.mean) / size, np.abs(new_groups.prob - run.groups.prob)


def not_converged_reasons(run: EPRun, tol: float, max_iter: int) -> list[str]:
    """Why an EP run is not converged, one phrase per reason (empty when it converged)."""
    reasons = []
    if run.ill_conditioned is not None:
        reasons.append(f"ill-conditioned: site variance x |x_i|^2 / noise_var reaches {run.ill_conditioned:.3g}, so "
                       f"posterior variances may be off by more than {MAX_VARIANCE_ERROR:g} relative")
    if run.failure is not None:
        reasons.append(f"EP stopped: {run.failure}")
    elif run.stopped and run.residual >= RESIDUAL_FACTOR * tol:
        reasons.append(f"EP was stopped by its decaying damping after {run.n_iter} iterations, not at a fixed point "
                       f"(residual: an undamped update would still change the fit by {run.residual:.3g} > "
                       f"{RESIDUAL_FACTOR:g} tol)")
    elif not run.stopped:
        reasons.append(f"EP did not converge in max_iter={max_iter} iterations (last change {run.change:.3g} > "
                       f"tol={tol})")
    if run.failure is None and not np.all(run.cavity.usable):
        reasons.append(f"{np.count_nonzero(~run.cavity.usable)} site(s) have no valid cavity at the end of EP "
                       "(posterior variances lost to rounding); log_evidence_ is NaN")
    return reasons


def warn_not_converged(name: str, reasons: list[str], stacklevel: int = 4) -> None:
    """One ConvergenceWarning for a fit: every reason, what it means for the estimate and what to do."""
    if reasons:
        warnings.warn(f"{name}: the fit is not converged: {'; '.join(reasons)}. {NOT_CONVERGED_ADVICE}.",
                      ConvergenceWarning, stacklevel=stacklevel)
