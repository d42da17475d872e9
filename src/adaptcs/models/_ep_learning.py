"""Hyper-parameters of GSS-EP from the measurements: type-II maximum likelihood and K-fold cross-validation.

docs/learning.md. theta = (p0, v0, s2), of which any subset is learned:

* **evidence** (type-II ML): a coarse search over p0 and s2 with v0 tied to the second moment of the data
  (``E[y_i^2] = s2 + v0 sum_j x_ij^2 p0_j``; :func:`coarse_search`, a cheaper walk over the 6 x 4 grid of :func:`grid`);
  from the point with the largest EP evidence, EP runs on with a damped EM-like step of theta
  (:func:`em_update`) after every site update (:func:`joint_run`) until sites and theta both stop moving: the
  fixed point of separate EM refinement steps (docs/learning.md), reached in one run instead of one EP run per EM step.
* **cv**: the same grid, scored by the held-out squared error of the posterior mean over K folds of the rows.

With group-specific prior knowledge (``p0`` one value per group) the offsets ``logit p0_g - level`` are kept and
only the common level is learned. A prior with classes (one p0 and one v0 per wavelet scale, say:
:class:`~adaptcs.models._ep.EPProblem`) learns one level per prior class and one slab variance per slab class by
the same EM-like steps, each summed over its own class; the coarse search moves all classes together. Everything
here works on unit-size data (see :mod:`._scaling`).

:func:`infer` is the one path of every GSS-EP fit: with nothing to learn it is one EP run at the given values.

Over 500 lines: the evidence and cross-validation paths share the grid, the coarse search and the final run, and
are read together (docs/learning.md follows this module's order).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, replace

import numpy as np
from scipy.special import expit
from sklearn.model_selection import KFold

from adaptcs.models._ep import (
    LEARNABLE,
    RESIDUAL_FACTOR,
    EPProblem,
    EPRun,
    EPSites,
    GroupPosterior,
    Hyper,
    _log_normal_at_zero,
    class_sums,
)
from adaptcs.models._hyperprior import Hyperprior, log_prior

GRID_P0 = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)
GRID_NOISE = (0.6, 0.3, 0.1, 0.03)  # times mean(y^2), visited in this (decreasing) order
# With a prior per scale, the EM-like steps creep along a ridge of the evidence (small fine-scale coefficients
# against noise: docs/learning.md, "Per scale"); after every joint run that stops short of its fixed point, the
# EM-like step from where it stopped is taken 2, 4, 8, ... times while the evidence grows, at most this many rounds:
EXTRAPOLATION_ROUNDS = 10
EXTRAPOLATION_STEPS = tuple(2.0 ** np.arange(1, 11))
P0_RANGE = (1e-4, 0.9)  # the learned mean prior probability is kept inside
TRANSITION_RANGE = (1e-4, 1.0 - 1e-4)  # with a tree prior, the learned transition probabilities are kept inside
NOISE_RANGE = (1e-6, 1.0)  # the learned noise variance, times mean(y^2)
V0_RANGE = (1e-3, 1e3)  # the learned slab variance, relative to the tied value at the learned p0 and s2
GRID_EP = {"tol": 1e-4, "max_iter": 200}  # badly specified grid points only freeze: do not let them cost more
SEARCH_EP = {"tol": 1e-3, "max_iter": 100}  # the coarse search only ranks points; the best one is refined
SEARCH_NOISE = (0.6, 0.3)  # noise levels (times mean(y^2)) tried for every p0 before the best chain continues
REFINE_EP = {"tol": 1e-5, "max_iter": 1000}  # the joint iteration of sites and hyper-parameters
THETA_TOL = 1e-3  # the joint iteration stops once theta moves less than this (in log units)
# Sequential design tracks theta from step to step (docs/learning.md, "In the design loop"): the joint run from the
# last step's sites and theta stops after 30 iterations and theta goes on moving at the next row (what this saves
# and costs in error: README, measured by benchmarks/bench_learning.py).
WARM_EP = {"tol": 1e-4, "max_iter": 30}
# A tracked theta counts as learned when one more EM-like step from it, at its final EP fit, would move no value
# by more than this (in log units): 2 % of v0 and s2, far inside their statistical uncertainty (~ sqrt(2 / n)).
TRACK_TOL = 0.02
# A fit that is read and stopped short (strictly): EP from its sites with these constant dampings in turn, at most
# this many iterations each. Measured on E3's 50 cold first fits (32 rows, the paper's values; the paper's decaying
# schedule stops short on 28): constant 0.5 then 0.3 leave 14, 0.2 12-13, 0.15 11, 0.1 9 (at 1.8 times the CPU of
# the 50 fits); below 0.1 a run ends by its damped change (tol / damping > 10 tol) before the strict test can pass.
STRICT_DAMPING = ((0.1, 1200),)
SQUAREM_CYCLES = 20  # accelerated cycles (3 EP runs each) a strict fit may spend on learned values that crawl
# With independent blocks (k-space lines) learning refines by SQUAREM to this EM-like residual (log units), not by
# the joint run: measured on 256 x 256 k-space lines (docs/log/mri.md, eighth session), 1e-3 stops 0.4 % short in v0
# (0.19 nats of evidence) where 1e-4 meets the joint run's maximum, at the same CPU.
SQUAREM_THETA_TOL = 1e-4
# The variance-decoupled fallback's outer steps in a fit that is read (its default, 50, bounds the refits that only
# choose rows). In E3's 50 learned loops 200 take one more cold fit to the fixed point (6 -> 5 not converged); 800
# take none more where the cold fits run alone (docs/model.md, "The variance-decoupled fallback").
STRICT_FALLBACK_OUTER = 200


@dataclass
class Learned:
    """The outcome of learning: the hyper-parameters, the EP run at them, and what it cost."""

    hyper: Hyper
    run: EPRun
    n_ep_fits: int
    converged: bool  # the joint iteration reached its fixed point (or CV scored every grid point)
    message: str = ""
    refits: int = 0  # warm refits since the last learning from scratch (sequential design)


@dataclass(frozen=True)
class WarmStart:
    """Where a warm-started fit starts: the last fit's sites and what it learned, in the data's units.

    Attributes
    ----------
    sites : EPSites
        The last fit's sites, in the units of the coefficients.
    hyper : Hyper or None
        What the last fit learned (None if it learned nothing).
    learn : tuple of str
        What it learned.
    refits : int
        Warm refits since the last fit from scratch (a search from scratch competes every ``restart_every``).
    """

    sites: EPSites
    hyper: Hyper | None = None
    learn: tuple = ()
    refits: int = 0

    def tracks(self, learn, method: str, d: int) -> bool:
        """Whether a fit learning ``learn`` by ``method`` on d coefficients can track the values learned here."""
        return self.hyper is not None and method == "evidence" and self.learn == tuple(learn) \
            and self.sites.var.shape[0] == d


def _usable(run: EPRun | None) -> bool:
    return run is not None and run.failure is None and np.isfinite(run.log_evidence)


def objective(problem: EPProblem, hyper: Hyper, run: EPRun) -> float:
    """What learning maximises: the EP log evidence at ``hyper``, plus the log density of the problem's hyperprior
    (type-II MAP) if it has one."""
    return float(run.log_evidence) + log_prior(problem.hyperprior, problem, hyper)


def grid(problem: EPProblem, start: Hyper, learn) -> list[list[Hyper]]:
    """The coarse grid as chains: one chain per p0 level, its points in decreasing s2 (EP warm-started along it).

    Dimensions not learned keep their starting value; v0 is tied to (p0, s2) when it is learned. The starting
    point is a chain of its own, so that learning never ends worse than where it began.
    """
    levels = [problem.levels_for(p) for p in GRID_P0] if "p0" in learn else [start.level]
    noises = [f * problem.mean_y2 for f in GRID_NOISE] if "noise_var" in learn else [start.noise_var]
    chains = []
    for level in levels:
        chains.append([Hyper(level, problem.tied_v0(level, s2) if "v0" in learn else start.v0, s2) for s2 in noises])
    return chains + [[start]]


def _slab_responsibility(cav, v0: np.ndarray):
    """Cavity moments where usable (:attr:`_Cavity.usable`), and the slab responsibility r1 and E[w_j^2 | slab] of
    the tilted distributions (cavity times the exact spike-and-slab factor), for slab variances ``v0`` of shape
    (d,). A flat cavity (no row touches the coefficient) gives the limits r1 = sigmoid(pc), E[w_j^2 | slab] = v0."""
    usable = cav.usable
    vc, mc, pc, v0 = cav.var[usable], cav.mean[usable], cav.logit[usable], v0[usable]
    slab = vc + v0
    if not cav.limit.any():
        r1 = expit(pc + _log_normal_at_zero(mc, slab) - _log_normal_at_zero(mc, vc))
        second_moment = vc * v0 / slab + (mc * v0 / slab) ** 2
        return vc, mc, slab, r1, second_moment
    limit = cav.limit[usable]
    with np.errstate(invalid="ignore"):
        r1 = np.where(limit, expit(pc), expit(pc + _log_normal_at_zero(mc, slab) - _log_normal_at_zero(mc, vc)))
        second_moment = np.where(limit, v0, vc * v0 / slab + (mc * v0 / slab) ** 2)
    return vc, mc, slab, r1, second_moment


def _explained(problem: EPProblem, post) -> float:
    """``|y - X m|^2 + tr(X V X^T)``: the expected squared residual under the posterior; O(n d + n^3)."""
    resid = problem.y - problem.fitted(post.mean)
    return float(resid @ resid + max(post.trace_data(), 0.0))


def evidence_gradient(problem: EPProblem, hyper: Hyper, run: EPRun) -> np.ndarray:
    """Gradient of the EP log evidence in :meth:`Hyper.phi`'s coordinates (levels, log v0s, log s2) at an EP fixed
    point (docs/learning.md, "Gradient").

    Exact (the total derivative) at a fixed point where every site matches moments; not where some site is
    clamped at ``v_inf`` (then only an approximation).

    Returns
    -------
    ndarray, shape (K_p + K_v + 1,)
        3 values without prior classes.
    """
    if problem.tree is not None:
        d_level = problem.tree.level_gradient(run.groups.tree, hyper.level)
    else:
        p0_g = expit(problem.prior_logit(hyper))
        d_level = class_sums(run.group_prob - p0_g, problem.group_class, problem.n_levels)
    v0 = problem.slab_var(hyper)
    vc, mc, slab, r1, _ = _slab_responsibility(run.cavity, v0)
    usable = run.cavity.usable
    d_log_v0 = class_sums(r1 * 0.5 * v0[usable] * (mc * mc / slab**2 - 1.0 / slab),  # 0 for a flat cavity
                          problem.coef_slab[usable], problem.n_slabs)
    d_log_s2 = -0.5 * problem.n + _explained(problem, run.post) / (2.0 * hyper.noise_var)
    gradient = np.concatenate([d_level, d_log_v0, [d_log_s2]])
    return gradient if problem.hyperprior is None else gradient + problem.hyperprior.gradient(problem, hyper)


def em_update(problem: EPProblem, hyper: Hyper, post, cavity, groups: GroupPosterior, learn) -> Hyper:
    """One EM-like step (docs/learning.md) from the EP posterior ``post``, its ``cavity`` and the groups' posterior
    at ``hyper``; the learned values only change, each prior and slab class from its own groups and coefficients.

    p0_k <- mean over the groups of class k of q(z_g) (with a tree: each transition probability <- its expected
    count over the expected count of its parent state, under q);  s2 <- (|y - X m|^2 + tr(X V X^T)) / n;
    v0_l <- sum_j r1_j E[w_j^2 | slab] / r_j / sum_j r1_j  over the coefficients of slab class l, under the
    tilted distributions (cavity x exact prior factor; ``r_j`` the fixed profile). With the problem's hyperprior,
    the posterior-mode versions (:class:`~adaptcs.models._hyperprior.Hyperprior`: each maximises its EM term plus
    its log prior).
    """
    level, v0, s2 = hyper.level, hyper.v0, hyper.noise_var
    prior = problem.hyperprior
    centre, has = (None, None) if prior is None else prior.centre(problem, hyper.phi().shape[0])
    if "p0" in learn and problem.tree is not None:
        level = problem.tree.em_levels(groups.tree, level, TRANSITION_RANGE)
    elif "p0" in learn:
        level = np.array([_class_level(problem, groups, k, prior if has is not None and has[k] else None,
                                       None if centre is None else centre[k]) for k in range(problem.n_levels)])
    if "noise_var" in learn:
        explained = _explained(problem, post)
        s2 = explained / problem.n if has is None or not has[-1] else \
            prior.scale_update(problem.n, explained, centre[-1])
        s2 = float(np.clip(s2, NOISE_RANGE[0] * problem.mean_y2, NOISE_RANGE[1] * problem.mean_y2))
    if "v0" in learn:
        _vc, _mc, _slab, r1, second_moment = _slab_responsibility(cavity, problem.slab_var(hyper))
        valid = cavity.usable
        classes = problem.coef_slab[valid]
        weight = class_sums(r1, classes, problem.n_slabs)
        moment = class_sums(r1 * second_moment / problem.slab_profile[valid], classes, problem.n_slabs)
        if has is None or not has[problem.n_levels]:
            with np.errstate(divide="ignore", invalid="ignore"):
                v0 = np.where(weight > 0.0, moment / weight, v0)
        else:
            v0 = np.array([prior.scale_update(weight[m], moment[m], centre[problem.n_levels + m])
                           for m in range(problem.n_slabs)])
        tied = problem.tied_v0(level, s2)
        v0 = np.clip(v0, V0_RANGE[0] * tied, V0_RANGE[1] * tied)
    return Hyper(level, v0, s2)


def _class_level(problem: EPProblem, groups: GroupPosterior, k: int, prior: Hyperprior | None,
                 centre: float | None) -> float:
    """The M-step of prior class ``k``'s level: mean prior probability = the mean of its groups' posterior
    probabilities (type-II ML), or the posterior mode with a prior centred at level ``centre``; the mean prior
    probability kept inside :data:`P0_RANGE`."""
    in_class = problem.group_class == k
    prob = groups.prob[in_class]
    if prior is None:
        return problem.level_for(float(np.clip(np.mean(prob), *P0_RANGE)), k)
    offsets = problem.offsets[in_class]
    level = prior.level_update(float(np.sum(prob)), lambda lv: lv + offsets, centre)
    mean = problem.mean_p0(level, k)
    return level if P0_RANGE[0] <= mean <= P0_RANGE[1] else problem.level_for(float(np.clip(mean, *P0_RANGE)), k)


def _mask(problem: EPProblem, learn) -> np.ndarray:
    """Which coordinates of :meth:`Hyper.phi` are learned; shape (K_p + K_v + 1,)."""
    sizes = {"p0": problem.n_levels, "v0": problem.n_slabs, "noise_var": 1}
    return np.concatenate([np.full(sizes[name], name in learn) for name in LEARNABLE])


def em_step(problem: EPProblem, hyper: Hyper, run: EPRun, learn) -> float:
    """The size of the EM-like step (:func:`em_update`) from ``hyper`` at its EP fit ``run``: the largest change
    of a learned value in :meth:`Hyper.phi`'s coordinates. Zero at a type-II fixed point; infinite where the run
    failed or a site has no valid cavity (no fixed point to step from)."""
    if run.failure is not None or not np.all(run.cavity.usable):
        return np.inf
    mask = _mask(problem, learn)
    target = em_update(problem, hyper, run.post, run.cavity, run.groups, learn)
    return float(np.max(np.abs(target.phi() - hyper.phi())[mask], initial=0.0))


def joint_run(problem: EPProblem, hyper: Hyper, sites: EPSites | None, learn, *, tol: float,
              max_iter: int) -> EPRun | None:
    """EP with the learned hyper-parameters moving along with the sites: every iteration also takes a damped
    EM-like step (:func:`em_update`, in :meth:`Hyper.phi`'s coordinates, weighted like the site update), so one run
    reaches the joint fixed point (sites matched at theta, theta the EM update of itself).

    Returns the run, its final hyper-parameters ``run.hyper`` (None if the posterior cannot be factorised at the
    start).
    """
    mask = _mask(problem, learn)

    def adapt(current: Hyper, post, cav, groups, weight) -> tuple[Hyper, float]:
        target = em_update(problem, current, post, cav, groups, learn)
        phi = current.phi() + weight * np.where(mask, target.phi() - current.phi(), 0.0)
        moved = Hyper.from_phi(phi, problem.n_levels)
        return moved, float(np.max(np.abs(phi - current.phi()))) * tol / THETA_TOL  # in the units of tol

    try:
        return problem.run(hyper, sites, tol=tol, max_iter=max_iter, adapt=adapt)
    except ValueError:
        return None


def coarse_search(problem: EPProblem, start: Hyper, learn) -> tuple[Hyper, EPRun, int]:
    """The starting point of the refinement: the best of a coarse search over (p0, s2), v0 tied when learned.

    The 6 x 4 grid (:func:`grid`) at a third of its cost and the same E1 results (README, "Hyper-parameters
    without an oracle"): every p0 at the two largest noise levels (cheap: EP converges fast there), EP
    warm-started along each chain and from one p0 to the next, to a loose tolerance; then only the best chain
    goes on to smaller noise levels, while its evidence grows. The starting point is a candidate too.

    Returns
    -------
    (hyper, run, n_fits) at the point with the largest evidence.
    """
    levels = [problem.levels_for(p) for p in sorted(GRID_P0, reverse=True)] if "p0" in learn else [start.level]
    learn_noise = "noise_var" in learn
    first_noises = [f * problem.mean_y2 for f in SEARCH_NOISE] if learn_noise else [start.noise_var]

    def point(level, noise_var):
        return Hyper(level, problem.tied_v0(level, noise_var) if "v0" in learn else start.v0, noise_var)

    candidates, n_fits, carried = [], 0, None
    for level in levels:
        sites = carried
        for i, noise_var in enumerate(first_noises):
            hyper = point(level, noise_var)
            run = problem.try_run(hyper, sites, **SEARCH_EP)
            n_fits += 1
            sites = run.sites if _usable(run) else None
            if i == 0:
                carried = sites  # the next p0 starts from this p0's sites at the largest noise level
            if _usable(run):
                candidates.append((objective(problem, hyper, run), hyper, run))
    run = problem.try_run(start, None, **SEARCH_EP)
    n_fits += 1
    if _usable(run):
        candidates.append((objective(problem, start, run), start, run))
    if not candidates:
        raise ValueError("EP failed at every point of the coarse search over the hyper-parameters")
    best_ev, best_hyper, best_run = max(candidates, key=lambda c: c[0])
    if learn_noise and best_hyper is not start:  # continue the best chain to smaller noise while it improves
        sites, previous = best_run.sites, best_ev
        for f in [f for f in GRID_NOISE if f * problem.mean_y2 < best_hyper.noise_var]:
            hyper = point(best_hyper.level, f * problem.mean_y2)
            run = problem.try_run(hyper, sites, **SEARCH_EP)
            n_fits += 1
            if not _usable(run) or objective(problem, hyper, run) < previous:
                break
            sites, previous = run.sites, objective(problem, hyper, run)
            if previous > best_ev:
                best_ev, best_hyper, best_run = previous, hyper, run
    return best_hyper, best_run, n_fits


def _joint(problem: EPProblem, hyper: Hyper, sites: EPSites | None, learn, ep=REFINE_EP) -> Learned | None:
    run = joint_run(problem, hyper, sites, learn, **ep)
    if not _usable(run):
        return None
    message = "" if run.converged else (f"EP with the hyper-parameters moving did not reach a joint fixed point in "
                                        f"{run.n_iter} iterations (last change {run.change:.3g})")
    return Learned(run.hyper, run, 1, run.converged, message)


def _refine(problem: EPProblem, hyper: Hyper, sites: EPSites | None, learn, ep=REFINE_EP) -> Learned | None:
    """From ``(hyper, sites)`` to the joint fixed point of sites and learned values: the joint run (:func:`_joint`),
    or, where the blocks are independent at fixed values (``problem.group_block``: k-space lines) and ``ep`` is the
    full refinement, SQUAREM on EM-like steps between EP runs at fixed values (:func:`_squarem`, to
    :data:`SQUAREM_THETA_TOL`). Moving values move every block, so the joint run factorises every block at every
    iteration, while EP at fixed values factorises only the blocks still moving: 93 against 371 CPU s on a
    256 x 256 slice at 64 lines, the same fixed point (docs/log/mri.md). The joint run where SQUAREM fails."""
    if problem.group_block is not None and ep is REFINE_EP and sites is not None:
        found, fits = _squarem(problem, hyper, sites, learn, tol=ep["tol"], max_iter=ep["max_iter"],
                               theta_tol=SQUAREM_THETA_TOL)
        if found is not None:
            return replace(found, n_ep_fits=fits)
        joint = _joint(problem, hyper, sites, learn, ep)
        return None if joint is None else replace(joint, n_ep_fits=fits + 1)
    return _joint(problem, hyper, sites, learn, ep)


def _clipped(problem: EPProblem, phi: np.ndarray) -> np.ndarray:
    """``phi`` with the levels and the noise variance inside :data:`P0_RANGE` (with a tree,
    :data:`TRANSITION_RANGE`) and :data:`NOISE_RANGE`."""
    phi = phi.copy()
    k = problem.n_levels
    low, high = P0_RANGE if problem.tree is None else TRANSITION_RANGE
    phi[:k] = np.clip(phi[:k], np.log(low / (1 - low)), np.log(high / (1 - high)))
    phi[-1] = np.clip(phi[-1], np.log(NOISE_RANGE[0] * problem.mean_y2), np.log(NOISE_RANGE[1] * problem.mean_y2))
    return phi


def _extrapolated(problem: EPProblem, learned: Learned, learn) -> tuple[Hyper, EPRun, int] | None:
    """The best point along the EM-like step from ``learned`` taken 2, 4, 8, ... times (EM acceleration by a line
    search on the evidence), or None if none has a larger evidence. Returns (hyper, run, EP fits)."""
    end = learned.hyper.phi()
    target = em_update(problem, learned.hyper, learned.run.post, learned.run.cavity, learned.run.groups, learn)
    learned_mask = _mask(problem, learn)
    direction = np.where(learned_mask, target.phi() - end, 0.0)
    best, n_fits = None, 0
    best_ev, sites = objective(problem, learned.hyper, learned.run), learned.run.sites
    for t in EXTRAPOLATION_STEPS:
        # only what is learned is kept in range: a given value (a noise variance below the range, say) stays as given
        phi = end + t * direction
        hyper = Hyper.from_phi(np.where(learned_mask, _clipped(problem, phi), phi), problem.n_levels)
        run = problem.try_run(hyper, sites, **SEARCH_EP)
        n_fits += 1
        if not _usable(run) or objective(problem, hyper, run) <= best_ev:
            break
        best, best_ev, sites = (hyper, run), objective(problem, hyper, run), run.sites
    return None if best is None else (*best, n_fits)


def _settled(problem: EPProblem, learned: Learned, learn) -> Learned:
    """A joint run that stopped short, checked at its end: EP at its hyper-parameters from its sites with fresh
    damping. The joint run's decaying damping also slows theta, so it often stops with theta at its EM fixed point
    and only the sites short of theirs. At the joint fixed point when this EP converges and one more EM-like step
    would move no learned value by more than ``RESIDUAL_FACTOR * THETA_TOL`` (the joint run's own test)."""
    run = problem.try_run(learned.hyper, learned.run.sites, **REFINE_EP)
    if not _usable(run):
        return learned
    step = em_step(problem, learned.hyper, run, learn)
    converged = run.converged and step < RESIDUAL_FACTOR * THETA_TOL
    message = "" if converged else (
        f"{learned.message}; at its end EP {'converged' if run.converged else 'did not converge'} and an EM-like "
        f"step would still move the hyper-parameters by {step:.3g} > {RESIDUAL_FACTOR * THETA_TOL:g} in log units")
    return replace(learned, run=run, n_ep_fits=learned.n_ep_fits + 1, converged=converged, message=message)


def learn_evidence(problem: EPProblem, start: Hyper, learn, ep=REFINE_EP, settle: bool = True) -> Learned:
    """Coarse search, then EP with EM-like steps from its best point to the joint fixed point (type-II ML).

    With a prior per scale, a joint run that stops short of its fixed point is followed by a line search along
    the EM-like step from where it stopped (:func:`_extrapolated`) and a new refinement from the best point, while
    that helps. Refinements are :func:`_refine`'s: the joint run, or SQUAREM on independent blocks. With
    ``settle``, a joint run still short of its fixed point is checked there (:func:`_settled`)."""
    hyper, run, n_fits = coarse_search(problem, start, learn)
    learned = _refine(problem, hyper, run.sites, learn, ep)
    if learned is None:  # the joint iteration broke down: keep the best point of the search, not converged
        return Learned(hyper, run, n_fits + 1, False, "EP failed while refining the hyper-parameters")
    n_fits += learned.n_ep_fits
    rounds = EXTRAPOLATION_ROUNDS if problem.n_slabs > 1 or problem.n_levels > 1 else 0
    for _ in range(rounds):
        if learned.converged:
            break
        found = _extrapolated(problem, learned, learn)
        if found is None:
            break
        hyper, run, fits = found
        again = _refine(problem, hyper, run.sites, learn, ep)
        n_fits += fits + (1 if again is None else again.n_ep_fits)
        if again is None or objective(problem, again.hyper, again.run) < objective(problem, hyper, run):
            break
        learned = again
    learned = replace(learned, n_ep_fits=n_fits)
    return _settled(problem, learned, learn) if settle and not learned.converged else learned


def learn_warm(problem: EPProblem, start: Hyper, sites: EPSites, learn) -> Learned | None:
    """From the previous fit's hyper-parameters and sites towards the joint fixed point (sequential design, at
    most :data:`WARM_EP` iterations; judge the outcome with :func:`em_step`); None if EP fails there."""
    return _joint(problem, start, sites, learn, WARM_EP)


def learn_cv(problem: EPProblem, start: Hyper, learn, n_folds: int, seed: int = 0) -> Learned:
    """The grid point with the smallest K-fold held-out squared error (docs/learning.md, "Cross-validation");
    EP refitted on all rows."""
    if problem.n < n_folds:
        raise ValueError(f"cross-validation with cv={n_folds} folds needs at least {n_folds} rows; got {problem.n}")
    chains = grid(problem, start, learn)
    points = [h for chain in chains for h in chain]
    scores = np.zeros(len(points))
    n_fits = 0
    for train, test in KFold(n_folds, shuffle=True, random_state=seed).split(problem.X):
        sub = problem.rows(train)
        i = 0
        for chain in chains:
            sites = None
            for hyper in chain:
                run = sub.try_run(hyper, sites, **GRID_EP)
                n_fits += 1
                if run is None or run.failure is not None:
                    scores[i] = np.inf
                    sites = None
                else:
                    resid = problem.y[test] - problem.X[test] @ run.post.mean
                    scores[i] += float(resid @ resid)
                    sites = run.sites
                i += 1
    if not np.any(np.isfinite(scores)):
        raise ValueError("EP failed on some fold at every grid point of the hyper-parameters")
    hyper = points[int(np.argmin(scores))]
    run = problem.try_run(hyper, None, **REFINE_EP)
    if not _usable(run):
        raise ValueError("EP failed on all rows at the hyper-parameters chosen by cross-validation")
    return Learned(hyper, run, n_fits + 1, True)


def infer(problem: EPProblem, start: Hyper, sites: EPSites, learn, *, tol: float, max_iter: int,
          schedule: str = "decay", method: str = "evidence", cv: int = 5, warm: WarmStart | None = None,
          restart_every: int = 4, strict: bool = False) -> Learned:
    """A GSS-EP fit on unit-size data: learn the hyper-parameters named in ``learn`` (none: the given ``start``),
    then run EP at them to ``tol``.

    Parameters
    ----------
    problem : EPProblem
    start : Hyper
        The given hyper-parameters (where learning starts).
    sites : EPSites
        The sites EP starts from without learning, and warm learning with them (the prior's or the last fit's).
    learn : tuple of str
        Names of :data:`LEARNABLE` to learn.
    tol, max_iter, schedule
        The final EP run's (:func:`adaptcs.models._ep.run_ep`); learning's own runs have theirs.
    method : {"evidence", "cv"}
    cv : int
        Folds of ``method="cv"``.
    warm : WarmStart, optional
        What the last fit learned; with ``warm.hyper`` scaled to ``problem`` (:meth:`WarmStart.tracks` says when it
        applies), the values are tracked from it (sequential design) and a search from scratch competes every
        ``restart_every`` refits.
    strict : bool
        A fit that someone reads (a design loop's checkpoint or final fit): where the tracked refit stops short
        (:data:`WARM_EP`'s 30 joint iterations, or EP cycling), go on to the strict test (:func:`strictly`).

    Returns
    -------
    Learned
        The hyper-parameters and the final run; ``converged`` says whether the learning converged (True without
        learning), ``refits`` counts warm refits since the last learning from scratch.

    Raises
    ------
    ValueError
        Where EP cannot start, or learning fails at every point it tries.
    """
    if not learn:
        given = Learned(start, problem.run(start, sites, tol=tol, max_iter=max_iter, schedule=schedule), 1, True)
        return strictly(problem, given, learn, tol=tol, max_iter=max_iter) if strict and not given.run.converged \
            else given
    refits = 0
    if method == "cv":
        learned = learn_cv(problem, start, learn, cv)
        n_fits = learned.n_ep_fits
    elif warm is not None:  # sequential design: from the last fit's values and sites, a full restart now and then
        start, refits = warm.hyper, warm.refits + 1
        learned = learn_warm(problem, start, sites, learn)
        n_fits = 0 if learned is None else learned.n_ep_fits
        if learned is None or refits % restart_every == 0:
            fresh = learn_evidence(problem, start, learn, WARM_EP, settle=False)  # judged by em_step below
            n_fits += fresh.n_ep_fits
            if learned is None or objective(problem, fresh.hyper, fresh.run) > objective(problem, learned.hyper,
                                                                                         learned.run):
                learned = fresh
    else:
        learned = learn_evidence(problem, start, learn)
        n_fits = learned.n_ep_fits
    hyper = learned.hyper
    run = problem.run(hyper, learned.run.sites, tol=tol, max_iter=max_iter, schedule=schedule)
    converged, message = learned.converged, learned.message
    if warm is not None and method != "cv":  # theta is tracked: learned when it is (nearly) its own EM update here
        step = em_step(problem, hyper, run, learn)
        converged = step < TRACK_TOL
        message = f"an EM-like step from the tracked values would still move them by {step:.3g} > {TRACK_TOL:g} in " \
                  "log units"
    outcome = Learned(hyper, run, n_fits + 1, converged, message, refits)
    if strict and not (outcome.converged and run.converged) and method != "cv":
        outcome = strictly(problem, outcome, learn, tol=tol, max_iter=max_iter)
    return outcome


def strictly(problem: EPProblem, fit: Learned, learn, *, tol: float, max_iter: int) -> Learned:
    """A fit that stopped short, taken on to the strict test where that can be done: with learned values first the
    joint run of sites and values to its fixed point (:func:`_refine` with :data:`REFINE_EP`, then checked at its
    end like a fit from scratch, :func:`_settled`), SQUAREM where the values still crawl (:func:`_squarem`); with
    given values EP from the stopped sites with a constant damping, each of :data:`STRICT_DAMPING` in turn until
    one passes the strict test. Returns the new fit if it passes, else ``fit`` (flagged as it was) with the extra
    EP runs counted."""
    n_fits = fit.n_ep_fits
    hyper, sites, converged, message = fit.hyper, fit.run.sites, True, ""
    problem = _with_strict_fallback(problem)
    if learn:
        joint = _refine(problem, hyper, sites, learn, REFINE_EP)
        if joint is None:
            return replace(fit, n_ep_fits=n_fits + 1)
        n_fits += joint.n_ep_fits
        if not joint.converged:
            joint = _settled(problem, replace(joint, n_ep_fits=0), learn)
            n_fits += joint.n_ep_fits
        hyper, sites, converged, message = joint.hyper, joint.run.sites, joint.converged, joint.message
        if not converged:  # the values crawl (EM-like steps at EP fixed points): accelerate them
            found, fits = _squarem(problem, hyper, sites, learn, tol=tol, max_iter=max_iter)
            n_fits += fits
            if found is None:
                return replace(fit, n_ep_fits=n_fits)
            return replace(found, n_ep_fits=n_fits, refits=fit.refits)
        return Learned(hyper, joint.run, n_fits, True, message, fit.refits)  # its EP run passed the strict test
    run, fits = _ep_to_fixed_point(problem, hyper, sites, tol=tol, max_iter=max_iter, schedules=STRICT_DAMPING)
    n_fits += fits
    return replace(fit, n_ep_fits=n_fits) if run is None else Learned(hyper, run, n_fits, True, message, fit.refits)


def _with_strict_fallback(problem: EPProblem) -> EPProblem:
    """``problem`` whose variance-decoupled fallback may take :data:`STRICT_FALLBACK_OUTER` outer steps (a fit that
    is read: whatever it costs); the same problem where it has no fallback."""
    if problem.fallback is None:
        return problem
    strict = copy.copy(problem)
    strict.fallback = functools.partial(problem.fallback, max_outer=STRICT_FALLBACK_OUTER)
    return strict


def _ep_to_fixed_point(problem: EPProblem, hyper: Hyper, sites: EPSites, *, tol: float, max_iter: int,
                       schedules) -> tuple[EPRun | None, int]:
    """EP at ``hyper`` from ``sites`` to the strict test: with each ``(damping, iterations)`` of ``schedules``
    (constant dampings; None: the problem's own decaying one, at most ``max_iter``) in turn until one passes.
    Returns (the converged run or None, EP runs made)."""
    for n_run, (damping, iterations) in enumerate(schedules, start=1):
        steady = problem
        if damping is not None:
            steady = copy.copy(problem)
            steady.damping, steady.damping_decay = damping, 1.0
        run = steady.try_run(hyper, sites, tol=tol, max_iter=min(max_iter, iterations))
        if run is not None and run.converged:
            return run, n_run
    return None, len(schedules)


def _squarem(problem: EPProblem, hyper: Hyper, sites: EPSites, learn, *, tol: float, max_iter: int,
             theta_tol: float = RESIDUAL_FACTOR * THETA_TOL) -> tuple[Learned | None, int]:
    """The learned values to their EM-like fixed point by SQUAREM (Varadhan & Roland 2008, scheme S3): two EM-like
    steps, each from an EP fixed point, then the squared extrapolation, kept only where it raises the objective
    (evidence plus log prior); at most :data:`SQUAREM_CYCLES` cycles, until an EM-like step would move no learned
    value by more than ``theta_tol`` (log units). Returns (the fit at the joint fixed point, or None if it was not
    reached; EP runs made)."""
    mask = _mask(problem, learn)
    schedules = ((None, REFINE_EP["max_iter"]),) + STRICT_DAMPING
    n_fits = 0

    def em_at(h: Hyper, start: EPSites):
        nonlocal n_fits
        run, fits = _ep_to_fixed_point(problem, h, start, tol=tol, max_iter=max_iter, schedules=schedules)
        n_fits += fits
        if run is None or not np.all(run.cavity.usable):
            return None, None
        return run, em_update(problem, h, run.post, run.cavity, run.groups, learn)

    run, target = em_at(hyper, sites)
    for _ in range(SQUAREM_CYCLES):
        if run is None:
            return None, n_fits
        r = np.where(mask, target.phi() - hyper.phi(), 0.0)
        if np.max(np.abs(r)) < theta_tol:
            return Learned(hyper, run, 0, True, ""), n_fits
        run1, target1 = em_at(target, run.sites)
        if run1 is None:
            return None, n_fits
        v = np.where(mask, target1.phi() - target.phi(), 0.0) - r
        best = (objective(problem, target, run1), target, run1, target1)
        if np.linalg.norm(v) > 0.0:
            alpha = min(-np.linalg.norm(r) / np.linalg.norm(v), -1.0)
            phi = hyper.phi() - 2.0 * alpha * r + alpha**2 * v
            jumped = Hyper.from_phi(np.where(mask, _clipped(problem, phi), phi), problem.n_levels)
            run2, target2 = em_at(jumped, run1.sites)
            if run2 is not None and objective(problem, jumped, run2) > best[0]:
                best = (objective(problem, jumped, run2), jumped, run2, target2)
        _value, hyper, run, target = best
    return None, n_fits
