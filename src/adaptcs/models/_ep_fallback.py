"""The fallback of :func:`adaptcs.models._ep.run_ep` where its damped parallel schedule circles a fixed point
(``EPProblem(..., fallback=stable_ep)``, what the estimators pass unless ``fallback=False``): the
variance-decoupled loop (:func:`adaptcs.models._ep_decoupled.decoupled_ep`), then, for the blocks it leaves
moving, Anderson-accelerated EP (:func:`adaptcs.models._ep_anderson.anderson_ep`). Both take a point only when
one undamped parallel update from it changes the fit by less than ``tol``.
"""

from __future__ import annotations

from adaptcs.models._ep_anderson import anderson_ep
from adaptcs.models._ep_decoupled import MAX_OUTER, FallbackRun, decoupled_ep


def stable_ep(problem, hyper, sites, *, tol: float, max_outer: int = MAX_OUTER) -> FallbackRun:
    """:func:`decoupled_ep` from ``sites`` (at most ``max_outer`` outer steps), then :func:`anderson_ep` from where
    it ended if it did not converge.

    Returns
    -------
    FallbackRun
        The converged run, or Anderson's last iterate; ``n_posteriors`` counts both stages.
    """
    decoupled = decoupled_ep(problem, hyper, sites, tol=tol, max_outer=max_outer)
    if decoupled.converged:
        return decoupled
    run = anderson_ep(problem, hyper, decoupled.sites, tol=tol)
    run.n_posteriors += decoupled.n_posteriors
    return run
