"""Variance-decoupled EP: the first stage of the fallback of :func:`adaptcs.models._ep.run_ep` where the parallel
update circles (:func:`adaptcs.models._ep_fallback.stable_ep`, what the estimators pass unless ``fallback=False``;
Anderson-accelerated EP follows where this loop circles too).

After some new rows the parallel EP update circles its fixed point instead of approaching it (docs/model.md, "Why
warm refits can be slow": a complex pair of the update's Jacobian outside the unit circle). Seeger & Nickisch
(AISTATS 2011) decouple EP's costly coupling, the posterior marginal variances, from the rest: an outer step
computes the exact marginals once; the inner steps keep every cavity *variance* frozen at that outer step's value
and iterate only the means, the cavity means from the current posterior mean ``u``::

    vc_j = 1 / (1 / V_jj - 1 / vt_j)                      (frozen, the outer step's exact cavity)
    mc_j = u_j + vc_j (u_j - mt_j) / vt_j                 (the cavity mean of the current posterior mean)

which is their inner loop with the direct effect of a site on its own marginal (``1 / rho = 1 / V_jj + pi - pi0``)
written out; the groups' cavity log-odds are exact throughout (the groups' posterior costs O(d)). The first inner
step of every outer step is the ordinary parallel update. A fixed point of the outer iteration is an EP fixed point,
and is taken only when one undamped parallel update from it would change the fit by less than ``tol`` (the
change :func:`run_ep` measures): stricter than :func:`run_ep`'s own test (``10 tol``). The point itself is
returned, not that update's result: where the parallel map is unstable, the update moves away from the fixed
point it started near.

Seeger & Nickisch prove convergence for log-concave sites; spike-and-slab sites are not, so here convergence is
measured, not promised (``docs/log/investigations/bench_decoupled_ep.py``): on the warm refits that the parallel
schedule leaves circling it reaches the strict test in 12-46 outer steps (86-324 posteriors or posterior means).

With independent blocks (``problem.group_block``: block-diagonal rows, every group inside one block) a block is
frozen once its own strict test passes, as in :func:`adaptcs.models._ep.run_ep`, and only the blocks still moving
are factorised: the few columns of a k-space line fit that circle cost the fallback a few columns' work, not the
whole image's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaptcs.models._ep import ActiveBlocks, _at, _Cavity, _cavity, _damped, _matched_sites

# Inner steps per outer step, the damping of every step and the outer steps allowed (the budget is about
# MAX_OUTER * (INNER_STEPS + 1) posteriors; measured in docs/log/investigations/bench_decoupled_ep.py).
INNER_STEPS = 6
DAMPING = 0.3
MAX_OUTER = 50


@dataclass
class FallbackRun:
    """The end of a fallback (:func:`decoupled_ep`, :func:`adaptcs.models._ep_anderson.anderson_ep`): the sites,
    posterior and groups after the last step."""

    sites: object  # EPSites
    post: object
    groups: object
    converged: bool  # one undamped parallel update from ``sites`` would change the fit by less than tol
    change: float  # that update's change (the residual of the strict test)
    n_outer: int  # outer steps (decoupled) or updates (Anderson)
    n_posteriors: int  # posteriors or posterior means computed: the cost, comparable with run_ep's iterations
    blocks_done: np.ndarray  # bool, shape (n_blocks,) (one block without independent blocks): strict test passed


def decoupled_ep(problem, hyper, sites, *, tol: float, max_outer: int = MAX_OUTER, inner_steps: int = INNER_STEPS,
                 damping: float = DAMPING) -> FallbackRun:
    """Variance-decoupled EP from ``sites`` at fixed hyper-parameters (see the module docstring).

    Parameters
    ----------
    problem : EPProblem
    hyper : Hyper
    sites : EPSites
        Where to start (usually where the parallel schedule stalled).
    tol : float
        :func:`run_ep`'s tolerance: the run has converged when one undamped parallel update changes the mean by less
        than ``tol`` of the largest coefficient and every group probability by less than ``tol``.
    max_outer, inner_steps : int
    damping : float
        Weight of every inner step (convex combination in the sites' natural parameters).

    Returns
    -------
    FallbackRun
        ``converged`` False: the last iterate after ``max_outer`` outer steps (the caller keeps its own).
    """
    model, v0, v_inf = _at(problem, hyper)
    logit_of = problem.coef_group
    blocks = ActiveBlocks(problem)

    def mean_of(s, last):  # the inner steps need the mean only (about half a posterior's cost where n < d)
        if hasattr(model, "posterior_mean"):
            return model.posterior_mean(s.var, s.mean / s.var)
        return blocks.posterior(model, hyper, s, last)[0].mean

    post, groups = blocks.posterior(model, hyper, sites)
    n_posteriors, change = 1, np.inf
    for outer in range(1, max_outer + 1):
        frozen = _cavity(post, sites, groups.logit[logit_of], problem.untouched)
        # the strict test: one undamped parallel update from here
        trial = _damped(sites, _matched_sites(frozen, v0, v_inf), frozen.usable & blocks.moving(), 1.0)
        trial_post, trial_groups = blocks.posterior(model, hyper, trial, post)
        n_posteriors += 1
        change = blocks.record(blocks.changes(post, groups, trial_post, trial_groups), tol)
        if change < tol:  # a fixed point to tol: keep it (the trial step may move away from an unstable one)
            return FallbackRun(sites, post, groups, True, change, outer, n_posteriors, ~blocks.active)
        cav = frozen
        for step in range(inner_steps):
            if step:
                u, groups = mean_of(sites, post), problem.group_posterior(hyper, sites)
                n_posteriors += 1
                with np.errstate(invalid="ignore"):
                    mean = np.where(frozen.valid, u + frozen.var * (u - sites.mean) / sites.var, frozen.mean)
                cav = _Cavity(var=frozen.var, mean=mean, logit=groups.logit[logit_of] - sites.logit,
                              valid=frozen.valid, limit=frozen.limit)
            sites = _damped(sites, _matched_sites(cav, v0, v_inf), cav.usable & blocks.moving(), damping)
        post, groups = blocks.posterior(model, hyper, sites, post)
        n_posteriors += 1
    return FallbackRun(sites, post, groups, False, change, max_outer, n_posteriors, ~blocks.active)
