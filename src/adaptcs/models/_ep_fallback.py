"""The fallback of :func:`adaptcs.models._ep.run_ep` where its damped parallel schedule circles a fixed point
(``EPProblem(..., fallback=stable_ep)``, what the estimators pass unless ``fallback=False``): the
variance-decoupled loop (:func:`adaptcs.models._ep_decoupled.decoupled_ep`), then, for the blocks it leaves
moving, Anderson-accelerated EP (:func:`adaptcs.models._ep_anderson.anderson_ep`) from where the loop ended, and,
for the blocks still moving, Anderson again from where the fallback started. Every stage takes a point only when one
undamped parallel update from it changes the fit by less than ``tol``.

Why the last stage: from the decoupled loop's end Anderson sometimes circles where from the parallel run's end it
does not (on 78 small problems whose parallel run stops short, ``docs/log/investigations/fallback_order.py``: the
first two stages reach 42, the three 46, Anderson alone 33). It costs only where both earlier stages failed.
"""

from __future__ import annotations

import numpy as np

from adaptcs.models._ep import ActiveBlocks, EPSites
from adaptcs.models._ep_anderson import anderson_ep
from adaptcs.models._ep_decoupled import MAX_OUTER, FallbackRun, decoupled_ep


def stable_ep(problem, hyper, sites: EPSites, *, tol: float, max_outer: int = MAX_OUTER) -> FallbackRun:
    """:func:`decoupled_ep` from ``sites`` (at most ``max_outer`` outer steps); where it does not converge,
    :func:`anderson_ep` from where it ended; where that does not converge either, :func:`anderson_ep` with the blocks
    it left moving back at ``sites`` (the blocks at their fixed points keep them).

    Returns
    -------
    FallbackRun
        The converged run, or the last stage's last iterate; ``n_posteriors`` counts every stage.
    """
    decoupled = decoupled_ep(problem, hyper, sites, tol=tol, max_outer=max_outer)
    if decoupled.converged:
        return decoupled
    run = anderson_ep(problem, hyper, decoupled.sites, tol=tol)
    spent = decoupled.n_posteriors + run.n_posteriors
    if not run.converged:
        keep = run.blocks_done[ActiveBlocks(problem).coef_block]
        restart = EPSites(var=np.where(keep, run.sites.var, sites.var), mean=np.where(keep, run.sites.mean, sites.mean),
                          logit=np.where(keep, run.sites.logit, sites.logit))
        run = anderson_ep(problem, hyper, restart, tol=tol)
        spent += run.n_posteriors
    run.n_posteriors = spent
    return run
