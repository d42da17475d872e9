"""Anderson-accelerated EP: the last stages of the fallback (:func:`adaptcs.models._ep_fallback.stable_ep`), for
the fixed points that neither the damped parallel schedule nor the variance-decoupled loop reaches.

Some EP fixed points are unstable under every damped schedule: the undamped update's Jacobian there has a complex
pair outside the unit circle, and damping only rotates it (docs/log/mri.md, "Anderson acceleration reaches the
columns that circle": k-space columns that parallel, sequential and variance-decoupled EP all leave circling, while
a double loop on the EP free energy reaches a fixed point of the same clamped update in 300-1000 outer steps).
Anderson acceleration (type II, Walker & Ni 2011) solves ``U(x) = x`` for the undamped parallel update ``U`` in the
sites' natural parameters ``x = (mt / vt, 1 / vt, pt)``: from the last ``memory`` steps ``dx_k``, and the changes of
the residual ``g = U(x) - x`` they made, ``dg_k``, it takes

    gamma = argmin |g - dG gamma|,     x <- x + beta g - (dX + beta dG) gamma,

a secant method, which converges to a fixed point whether or not the plain iteration is stable there. Nothing is
changed in what a fixed point is: the update ``U`` is :func:`adaptcs.models._ep._matched_sites`' (site variances
clamped at ``v_inf`` as everywhere), and a block is done only when one undamped update from its sites changes its
fit by less than ``tol`` (the strict test of :func:`adaptcs.models._ep_decoupled.decoupled_ep`).

With independent blocks (``problem.group_block``) every block has its own history and its own least-squares
problem (all solved at once), and is frozen once its strict test passes; only the blocks still moving are
factorised. A step that would leave a site precision not positive (or not finite) is replaced, in that block, by
the damped plain step ``x + SAFE_STEP g``, and the block's history restarts.
"""

from __future__ import annotations

import numpy as np

from adaptcs.models._ep import ActiveBlocks, EPSites, _at, _cavity, _damped, _matched_sites
from adaptcs.models._ep_decoupled import FallbackRun

#: Steps remembered, the mixing ``beta`` and the updates allowed (each costs two factorisations of the blocks still
#: moving; measured on the circling k-space columns in docs/log/mri.md: 40-120 updates).
MEMORY = 10
MIXING = 0.5
MAX_ITER = 150
SAFE_STEP = 0.3
# Tikhonov weight of the least-squares problem, relative to the trace of its normal matrix.
REGULARISATION = 1e-10


def anderson_ep(problem, hyper, sites: EPSites, *, tol: float, max_iter: int = MAX_ITER, memory: int = MEMORY,
                mixing: float = MIXING):
    """Anderson-accelerated undamped EP from ``sites`` at fixed hyper-parameters (see the module docstring).

    Parameters
    ----------
    problem : EPProblem
    hyper : Hyper
    sites : EPSites
        Where to start (usually where the variance-decoupled loop ended).
    tol : float
        The strict test's tolerance (that of :func:`adaptcs.models._ep.run_ep`).
    max_iter, memory : int
        Updates allowed; steps remembered by every block.
    mixing : float
        ``beta`` in (0, 1].

    Returns
    -------
    :class:`adaptcs.models._ep_decoupled.FallbackRun`
        ``converged`` False: the last iterate after ``max_iter`` updates (the caller keeps its own).
    """
    model, v0, v_inf = _at(problem, hyper)
    logit_of = problem.coef_group
    blocks = ActiveBlocks(problem)
    n_blocks, active = blocks.n_blocks, blocks.active  # ``active`` is updated in place by ``blocks.record``
    d = sites.var.shape[0]
    b = d // n_blocks

    def natural(s: EPSites) -> np.ndarray:  # (n_blocks, 3 b): every block's (mt / vt, 1 / vt, pt)
        return np.stack([s.mean / s.var, 1.0 / s.var, s.logit]).reshape(3, n_blocks, b).transpose(1, 0, 2) \
            .reshape(n_blocks, 3 * b)

    def sites_of(x: np.ndarray) -> EPSites:
        h, pi, pt = x.reshape(n_blocks, 3, b).transpose(1, 0, 2).reshape(3, d)
        return EPSites(var=1.0 / pi, mean=h / pi, logit=pt)

    post, groups = blocks.posterior(model, hyper, sites)
    n_posteriors, change = 1, np.inf
    x = natural(sites)
    past_x, past_g = [], []  # the last memory + 1 iterates and residuals, (n_blocks, 3 b) each
    start = np.zeros(n_blocks, dtype=int)  # each block's history begins at this entry of past_x
    for iteration in range(1, max_iter + 1):
        cav = _cavity(post, sites, groups.logit[logit_of], problem.untouched)
        updated = _damped(sites, _matched_sites(cav, v0, v_inf), cav.usable & blocks.moving(), 1.0)
        updated_post, updated_groups = blocks.posterior(model, hyper, updated, post)
        n_posteriors += 1
        change = blocks.record(blocks.changes(post, groups, updated_post, updated_groups), tol)
        if not active.any():  # every block at a fixed point to tol: keep the points, not their updates
            return FallbackRun(sites, post, groups, True, change, iteration, n_posteriors, ~active)
        g = natural(updated) - x
        past_x.append(x)
        past_g.append(g)
        if len(past_x) > memory + 1:
            past_x.pop(0)
            past_g.pop(0)
            start = np.maximum(start - 1, 0)
        step = mixing * g
        if len(past_x) > 1:
            dX = np.diff(np.stack(past_x, axis=1), axis=1)  # (n_blocks, k, 3 b)
            dG = np.diff(np.stack(past_g, axis=1), axis=1)
            remembered = np.arange(dX.shape[1])[None, :] >= start[:, None]  # (n_blocks, k)
            dX, dG = dX * remembered[:, :, None], dG * remembered[:, :, None]
            normal = np.matmul(dG, dG.transpose(0, 2, 1))
            ridge = REGULARISATION * np.trace(normal, axis1=1, axis2=2) + np.finfo(float).tiny
            normal += ridge[:, None, None] * np.eye(dX.shape[1])
            gamma = np.linalg.solve(normal, np.einsum("qkj,qj->qk", dG, g)[:, :, None])[:, :, 0]
            step -= np.einsum("qkj,qk->qj", dX + mixing * dG, gamma)
        proposed, bad = _safeguarded(x + step, x, g, b)
        start[bad] = len(past_x)  # the history restarts after this step
        proposed[~active] = x[~active]
        x = proposed
        sites = sites_of(x)
        post, groups = blocks.posterior(model, hyper, sites, post)
        n_posteriors += 1
    return FallbackRun(sites, post, groups, False, change, max_iter, n_posteriors, ~active)


def _safeguarded(proposed: np.ndarray, x: np.ndarray, g: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
    """``proposed`` (n_blocks, 3 b), with the blocks where it has a site precision ``<= 0`` or a value not finite
    replaced by the damped plain step ``x + SAFE_STEP g`` (a convex combination of positive precisions, so
    positive); and which blocks were replaced, shape (n_blocks,)."""
    bad = ~np.all(np.isfinite(proposed), axis=1) | np.any(proposed[:, b:2 * b] <= 0.0, axis=1)
    out = proposed.copy()
    out[bad] = x[bad] + SAFE_STEP * g[bad]
    return out, bad
