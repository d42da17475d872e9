"""Hyper-parameters of GSS-EP from the measurements: type-II maximum likelihood and K-fold cross-validation.

docs/learning.md. theta = (p0, v0, s2), of which any subset is learned:

* **evidence** (type-II ML): a coarse search over p0 and s2 with v0 tied to the second moment of the data
  (``E[y_i^2] = s2 + v0 sum_j x_ij^2 p0_j``; :func:`coarse_search`, a cheaper walk over the 6 x 4 grid of :func:`grid`);
  from the point with the largest EP evidence, EP runs on with a damped EM-like step of theta
  (:func:`em_update`) after every site update (:func:`joint_run`) until sites and theta both stop moving: the
  fixed point of separate EM refinement steps (docs/learning.md), reached in one run instead of one EP run per EM step.
* **cv**: the same grid, scored by the held-out squared error of the posterior mean over K folds of the rows.

With group-specific prior knowledge (``p0`` one value per group) the offsets ``logit p0_g - level`` are kept and
only the common level is learned. Everything here works on unit-size data (see :mod:`._scaling`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, logit
from sklearn.model_selection import KFold

from adaptcs.models._ep import LEARNABLE, EPSites, _EPRun, _log_normal_at_zero, _run_ep
from adaptcs.models._gaussian import LinearGaussianModel

GRID_P0 = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)
GRID_NOISE = (0.6, 0.3, 0.1, 0.03)  # times mean(y^2), visited in this (decreasing) order
P0_RANGE = (1e-4, 0.9)  # the learned mean prior probability is kept inside
NOISE_RANGE = (1e-6, 1.0)  # the learned noise variance, times mean(y^2)
V0_RANGE = (1e-3, 1e3)  # the learned slab variance, relative to the tied value at the learned p0 and s2
GRID_EP = {"tol": 1e-4, "max_iter": 200}  # badly specified grid points only freeze: do not let them cost more
SEARCH_EP = {"tol": 1e-3, "max_iter": 100}  # the coarse search only ranks points; the best one is refined
SEARCH_NOISE = (0.6, 0.3)  # noise levels (times mean(y^2)) tried for every p0 before the best chain continues
REFINE_EP = {"tol": 1e-5, "max_iter": 1000}  # the joint iteration of sites and hyper-parameters
THETA_TOL = 1e-3  # the joint iteration stops once theta moves less than this (in log units)
# Sequential design tracks theta from step to step (docs/learning.md, "In the design loop"): the joint run from the
# last step's sites and theta stops after 30 iterations and theta goes on moving at the next row; E5's refit
# cost falls from 12 to under 5 oracle refits, E3's error does not change (README, benchmarks/bench_learning.py).
WARM_EP = {"tol": 1e-4, "max_iter": 30}
# A tracked theta counts as learned when one more EM-like step from it, at its final EP fit, would move no value
# by more than this (in log units): 2 % of v0 and s2, far inside their statistical uncertainty (~ sqrt(2 / n)).
TRACK_TOL = 0.02


@dataclass(frozen=True)
class Hyper:
    """GSS-EP hyper-parameters on unit-size data.

    Attributes
    ----------
    level : float
        Common prior log-odds: ``p0_g = expit(level + offset_g)``.
    v0 : float
        Slab variance.
    noise_var : float
        Noise variance.
    """

    level: float
    v0: float
    noise_var: float

    def phi(self) -> np.ndarray:
        """The coordinates the optimiser works in: (level, log v0, log s2)."""
        return np.array([self.level, np.log(self.v0), np.log(self.noise_var)])


@dataclass
class Learned:
    """The outcome of learning: the hyper-parameters, the EP run at them, and what it cost."""

    hyper: Hyper
    run: _EPRun
    n_ep_fits: int
    converged: bool  # the joint iteration reached its fixed point (or CV scored every grid point)
    message: str = ""


class EPProblem:
    """Unit-size data, group structure and EP settings: runs EP at any hyper-parameters.

    Parameters
    ----------
    X : ndarray, shape (n, d)
    y : ndarray, shape (n,)
    coef_group : ndarray of int, shape (d,)
    offsets : ndarray, shape (G,)
        Fixed per-group prior log-odds offsets (zeros without group-specific prior knowledge).
    v_inf_ratio, damping, damping_decay : float
        As in :class:`adaptcs.models.GroupSpikeSlabEP`.
    progress : callable, optional
        Passed to every EP run (see :func:`adaptcs.models._ep._run_ep`).
    """

    def __init__(self, X, y, coef_group, offsets, *, v_inf_ratio: float, damping: float, damping_decay: float,
                 progress=None):
        self.X, self.y, self.coef_group, self.offsets = X, y, coef_group, offsets
        self.v_inf_ratio, self.damping, self.damping_decay = v_inf_ratio, damping, damping_decay
        self.progress = progress
        self.n = X.shape[0]
        self.mean_y2 = float(np.mean(y * y))
        self._column_power = np.mean(X * X, axis=0)  # (d,): mean_i x_ij^2
        self._models: dict[float, LinearGaussianModel] = {}

    def rows(self, index: np.ndarray) -> EPProblem:
        """The same problem on a subset of the rows."""
        return EPProblem(self.X[index], self.y[index], self.coef_group, self.offsets, v_inf_ratio=self.v_inf_ratio,
                         damping=self.damping, damping_decay=self.damping_decay, progress=self.progress)

    def prior_logit(self, hyper: Hyper) -> np.ndarray:
        """Prior log-odds of every group at ``hyper``, shape (G,)."""
        return hyper.level + self.offsets

    def mean_p0(self, level: float) -> float:
        """Mean prior probability of a group at ``level``."""
        return float(np.mean(expit(level + self.offsets)))

    def level_for(self, mean_p0: float) -> float:
        """The level whose mean prior probability is ``mean_p0`` (monotone; exact without offsets)."""
        if not np.any(self.offsets):
            return float(logit(mean_p0))
        return float(brentq(lambda lv: self.mean_p0(lv) - mean_p0, -60.0, 60.0, xtol=1e-12))

    def tied_v0(self, level: float, noise_var: float) -> float:
        """The slab variance that makes the prior's mean y_i^2 equal the data's (docs/learning.md)."""
        prob = expit(level + self.offsets)[self.coef_group]
        signal = max(self.mean_y2 - noise_var, 1e-3 * self.mean_y2)
        return signal / float(self._column_power @ prob)

    def model(self, noise_var: float) -> LinearGaussianModel:
        """The Gaussian part of the model at noise variance ``noise_var`` (cached per value)."""
        if noise_var not in self._models:
            if len(self._models) > 64:
                self._models.clear()
            self._models[noise_var] = LinearGaussianModel(self.X, self.y, noise_var)
        return self._models[noise_var]

    def run(self, hyper: Hyper, sites: EPSites | None = None, *, tol: float, max_iter: int) -> _EPRun | None:
        """EP at ``hyper`` from ``sites`` (the prior's when None); None if the posterior cannot be factorised."""
        prior_logit = self.prior_logit(hyper)
        if sites is None:
            sites = EPSites.initial(expit(prior_logit)[self.coef_group], hyper.v0)
        try:
            return _run_ep(self.model(hyper.noise_var), sites, prior_logit, self.coef_group, hyper.v0,
                           self.v_inf_ratio * hyper.v0, damping=self.damping, damping_decay=self.damping_decay,
                           tol=tol, max_iter=max_iter, progress=self.progress)
        except ValueError:
            return None


def _usable(run: _EPRun | None) -> bool:
    return run is not None and run.failure is None and np.isfinite(run.log_evidence)


def grid(problem: EPProblem, start: Hyper, learn) -> list[list[Hyper]]:
    """The coarse grid as chains: one chain per p0 level, its points in decreasing s2 (EP warm-started along it).

    Dimensions not learned keep their starting value; v0 is tied to (p0, s2) when it is learned. The starting
    point is a chain of its own, so that learning never ends worse than where it began.
    """
    levels = [problem.level_for(p) for p in GRID_P0] if "p0" in learn else [start.level]
    noises = [f * problem.mean_y2 for f in GRID_NOISE] if "noise_var" in learn else [start.noise_var]
    chains = []
    for level in levels:
        chains.append([Hyper(level, problem.tied_v0(level, s2) if "v0" in learn else start.v0, s2) for s2 in noises])
    return chains + [[start]]


def _slab_responsibility(cav, v0: float):
    """Cavity moments where valid, and the slab responsibility r1 and E[w_j^2 | slab] of the tilted
    distributions (cavity times the exact spike-and-slab factor)."""
    vc, mc, pc = cav.var[cav.valid], cav.mean[cav.valid], cav.logit[cav.valid]
    slab = vc + v0
    r1 = expit(pc + _log_normal_at_zero(mc, slab) - _log_normal_at_zero(mc, vc))
    second_moment = vc * v0 / slab + (mc * v0 / slab) ** 2
    return vc, mc, slab, r1, second_moment


def _explained(problem: EPProblem, post) -> float:
    """``|y - X m|^2 + tr(X V X^T)``: the expected squared residual under the posterior; O(n d + n^3)."""
    resid = problem.y - problem.X @ post.mean
    return float(resid @ resid + max(post.trace_data(), 0.0))


def evidence_gradient(problem: EPProblem, hyper: Hyper, run: _EPRun) -> np.ndarray:
    """Gradient of the EP log evidence in (level, log v0, log s2) at an EP fixed point (docs/learning.md, "Gradient").

    Exact (the total derivative) at a fixed point where every site matches moments; not where some site is
    clamped at ``v_inf`` (then only an approximation).

    Returns
    -------
    ndarray, shape (3,)
    """
    p0_g = expit(problem.prior_logit(hyper))
    d_level = float(np.sum(run.group_prob - p0_g))
    vc, mc, slab, r1, _ = _slab_responsibility(run.cavity, hyper.v0)
    d_log_v0 = float(np.sum(r1 * 0.5 * hyper.v0 * (mc * mc / slab**2 - 1.0 / slab)))
    d_log_s2 = -0.5 * problem.n + _explained(problem, run.post) / (2.0 * hyper.noise_var)
    return np.array([d_level, d_log_v0, d_log_s2])


def em_update(problem: EPProblem, hyper: Hyper, post, cavity, group_prob: np.ndarray, learn) -> Hyper:
    """One EM-like step (docs/learning.md) from the EP posterior ``post``, its ``cavity`` and group probabilities at
    ``hyper``; the learned values only change.

    p0 <- mean_g q(z_g);  s2 <- (|y - X m|^2 + tr(X V X^T)) / n;
    v0 <- sum_j r1_j E[w_j^2 | slab] / sum_j r1_j  under the tilted distributions (cavity x exact prior factor).
    """
    level, v0, s2 = hyper.level, hyper.v0, hyper.noise_var
    if "p0" in learn:
        level = problem.level_for(float(np.clip(np.mean(group_prob), *P0_RANGE)))
    if "noise_var" in learn:
        s2 = float(np.clip(_explained(problem, post) / problem.n, NOISE_RANGE[0] * problem.mean_y2,
                           NOISE_RANGE[1] * problem.mean_y2))
    if "v0" in learn:
        _vc, _mc, _slab, r1, second_moment = _slab_responsibility(cavity, hyper.v0)
        if np.sum(r1) > 0.0:
            v0 = float(np.sum(r1 * second_moment) / np.sum(r1))
        tied = problem.tied_v0(level, s2)
        v0 = float(np.clip(v0, V0_RANGE[0] * tied, V0_RANGE[1] * tied))
    return Hyper(level, v0, s2)


def _mask(learn) -> np.ndarray:
    """Which of (level, log v0, log s2) are learned; shape (3,)."""
    return np.array([name in learn for name in LEARNABLE])


def em_step(problem: EPProblem, hyper: Hyper, run: _EPRun, learn) -> float:
    """The size of the EM-like step (:func:`em_update`) from ``hyper`` at its EP fit ``run``: the largest change
    of a learned value in (level, log v0, log s2). Zero at a type-II fixed point."""
    mask = _mask(learn)
    target = em_update(problem, hyper, run.post, run.cavity, run.group_prob, learn)
    return float(np.max(np.abs(target.phi() - hyper.phi())[mask], initial=0.0))


def joint_run(problem: EPProblem, hyper: Hyper, sites: EPSites | None, learn, *, tol: float,
              max_iter: int) -> tuple[Hyper, _EPRun | None]:
    """EP with the learned hyper-parameters moving along with the sites: every iteration also takes a damped
    EM-like step (:func:`em_update`, in (level, log v0, log s2), weighted like the site update), so one run
    reaches the joint fixed point (sites matched at theta, theta the EM update of itself).

    Returns the final hyper-parameters and run (None if the posterior cannot be factorised at the start).
    """
    mask = _mask(learn)
    state = {"hyper": hyper}

    def adapt(post, cav, group_prob, weight):
        current = state["hyper"]
        target = em_update(problem, current, post, cav, group_prob, learn)
        phi = current.phi() + weight * np.where(mask, target.phi() - current.phi(), 0.0)
        moved = Hyper(float(phi[0]), float(np.exp(phi[1])), float(np.exp(phi[2])))
        state["hyper"] = moved
        change = float(np.max(np.abs(phi - current.phi()))) * tol / THETA_TOL  # in the units of the sites' tol
        return (problem.model(moved.noise_var), problem.prior_logit(moved), moved.v0,
                problem.v_inf_ratio * moved.v0, change)

    prior_logit = problem.prior_logit(hyper)
    if sites is None:
        sites = EPSites.initial(expit(prior_logit)[problem.coef_group], hyper.v0)
    try:
        run = _run_ep(problem.model(hyper.noise_var), sites, prior_logit, problem.coef_group, hyper.v0,
                      problem.v_inf_ratio * hyper.v0, damping=problem.damping, damping_decay=problem.damping_decay,
                      tol=tol, max_iter=max_iter, adapt=adapt, progress=problem.progress)
    except ValueError:
        return hyper, None
    return state["hyper"], run


def coarse_search(problem: EPProblem, start: Hyper, learn) -> tuple[Hyper, _EPRun, int]:
    """The starting point of the refinement: the best of a coarse search over (p0, s2), v0 tied when learned.

    The 6 x 4 grid (:func:`grid`) at a third of its cost and the same E1 results (0.303 on 20 signals,
    the same evidence): every p0 at the two largest noise levels (cheap: EP converges fast there), EP
    warm-started along each chain and from one p0 to the next, to a loose tolerance; then only the best chain
    goes on to smaller noise levels, while its evidence grows. The starting point is a candidate too.

    Returns
    -------
    (hyper, run, n_fits) at the point with the largest evidence.
    """
    levels = [problem.level_for(p) for p in sorted(GRID_P0, reverse=True)] if "p0" in learn else [start.level]
    learn_noise = "noise_var" in learn
    first_noises = [f * problem.mean_y2 for f in SEARCH_NOISE] if learn_noise else [start.noise_var]

    def point(level, noise_var):
        return Hyper(level, problem.tied_v0(level, noise_var) if "v0" in learn else start.v0, noise_var)

    candidates, n_fits, carried = [], 0, None
    for level in levels:
        sites = carried
        for i, noise_var in enumerate(first_noises):
            hyper = point(level, noise_var)
            run = problem.run(hyper, sites, **SEARCH_EP)
            n_fits += 1
            sites = run.sites if _usable(run) else None
            if i == 0:
                carried = sites  # the next p0 starts from this p0's sites at the largest noise level
            if _usable(run):
                candidates.append((run.log_evidence, hyper, run))
    run = problem.run(start, None, **SEARCH_EP)
    n_fits += 1
    if _usable(run):
        candidates.append((run.log_evidence, start, run))
    if not candidates:
        raise ValueError("EP failed at every point of the coarse search over the hyper-parameters")
    best_ev, best_hyper, best_run = max(candidates, key=lambda c: c[0])
    if learn_noise and best_hyper is not start:  # continue the best chain to smaller noise while it improves
        sites, previous = best_run.sites, best_ev
        for f in [f for f in GRID_NOISE if f * problem.mean_y2 < best_hyper.noise_var]:
            hyper = point(best_hyper.level, f * problem.mean_y2)
            run = problem.run(hyper, sites, **SEARCH_EP)
            n_fits += 1
            if not _usable(run) or run.log_evidence < previous:
                break
            sites, previous = run.sites, run.log_evidence
            if run.log_evidence > best_ev:
                best_ev, best_hyper, best_run = run.log_evidence, hyper, run
    return best_hyper, best_run, n_fits


def _joint(problem: EPProblem, hyper: Hyper, sites: EPSites | None, learn, ep=REFINE_EP) -> Learned | None:
    hyper, run = joint_run(problem, hyper, sites, learn, **ep)
    if not _usable(run):
        return None
    message = "" if run.converged else (f"EP with the hyper-parameters moving did not reach a joint fixed point in "
                                        f"{run.n_iter} iterations (last change {run.change:.3g})")
    return Learned(hyper, run, 1, run.converged, message)


def learn_evidence(problem: EPProblem, start: Hyper, learn, ep=REFINE_EP) -> Learned:
    """Coarse search, then EP with EM-like steps from its best point to the joint fixed point (type-II ML)."""
    hyper, run, n_fits = coarse_search(problem, start, learn)
    learned = _joint(problem, hyper, run.sites, learn, ep)
    if learned is None:  # the joint iteration broke down: keep the best point of the search, not converged
        return Learned(hyper, run, n_fits + 1, False, "EP failed while refining the hyper-parameters")
    return replace(learned, n_ep_fits=n_fits + 1)


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
                run = sub.run(hyper, sites, **GRID_EP)
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
    run = problem.run(hyper, None, **REFINE_EP)
    if not _usable(run):
        raise ValueError("EP failed on all rows at the hyper-parameters chosen by cross-validation")
    return Learned(hyper, run, n_fits + 1, True)
