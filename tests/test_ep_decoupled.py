"""The variance-decoupled EP (the fallback of run_ep where the parallel update circles; its Anderson stage is in
tests/test_ep_anderson.py), against a dense EP written out in tests/reference_ep.py: its fixed point on a small
problem and on independent blocks (with the Anderson stage too), and the fixed-point property of what it returns on a
warm refit of a designed E3 loop where the parallel schedule stalls."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import expit

import adaptcs.models._ep as ep
from adaptcs.experiments import run_job
from adaptcs.models._ep_anderson import anderson_ep
from adaptcs.models._ep_decoupled import decoupled_ep
from adaptcs.models._ep_fallback import stable_ep

from reference_ep import reference_ep as _reference_ep


def reference_ep(*args, **kwargs):
    """The dense reference; its evidence (unused here) may take the log of 0 for groups surely on."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _reference_ep(*args, **kwargs)


def _small_problem(seed: int):
    rng = np.random.default_rng(seed)
    n, G, size = 14, 10, 3
    groups = np.repeat(np.arange(G), size)
    w = np.zeros(G * size)
    for g in rng.choice(G, 3, replace=False):
        w[groups == g] = rng.normal(size=size)
    X = rng.normal(size=(n, G * size))
    y = X @ w + 0.1 * rng.normal(size=n)
    return X, y, groups


@pytest.mark.parametrize("seed", [0, 2])
def test_decoupled_ep_reaches_the_dense_reference_fixed_point(seed):
    X, y, groups = _small_problem(seed)
    G, p0, v0, s2 = groups.max() + 1, 0.3, 1.0, 0.01
    problem = ep.EPProblem(X, y, groups, np.zeros(G), v_inf_ratio=100.0, damping=0.9, damping_decay=0.99)
    hyper = ep.Hyper(np.array([np.log(p0 / (1 - p0))]), np.array([v0]), s2)
    prior = ep.EPSites.initial(np.full(X.shape[1], p0), np.full(X.shape[1], v0))
    run = decoupled_ep(problem, hyper, prior, tol=1e-8, max_outer=400)
    mean, group_prob, _ = reference_ep(X, y, groups, np.full(G, p0), v0, s2, v_inf=100.0 * v0)
    assert run.converged
    scale = np.max(np.abs(mean))
    np.testing.assert_allclose(run.post.mean, mean, atol=1e-6 * scale)
    np.testing.assert_allclose(run.groups.prob, group_prob, atol=1e-6)


def _stalled_e3_refit():
    """The first warm refit of the designed E3 loop of signal 0 that the parallel schedule leaves not converged
    (paper's values), with the warm sites it started from."""
    found = []
    original = ep.run_ep

    def recording(problem, hyper, sites, **kw):
        problem.fallback = None
        start = sites.copy()
        run = original(problem, hyper, sites, **kw)
        if kw.get("schedule") == "adaptive" and not run.converged and not found:
            found.append((problem.rows(np.arange(problem.n)), hyper, start, kw))
        return run

    ep.run_ep = recording
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_job("E3", 0, "gss_ep", "design", [0], hyperparameters="oracle")
    finally:
        ep.run_ep = original
    assert found, "E3 signal 0 no longer has a warm refit that stalls: pick another signal"
    return found[0]


def test_a_stalled_warm_refit_ends_at_an_ep_fixed_point():
    problem, hyper, start, kw = _stalled_e3_refit()
    problem.fallback = None
    parallel = ep.run_ep(problem, hyper, start.copy(), **kw)
    problem.fallback = decoupled_ep
    run = ep.run_ep(problem, hyper, start.copy(), **kw)
    assert not parallel.converged and run.converged and run.n_fallback > 0
    # independently: one undamped update of the dense reference EP from the returned sites barely moves the mean
    p0 = expit(problem.prior_logit(hyper))
    v0 = problem.slab_var(hyper)
    sites = (run.sites.var, run.sites.mean, run.sites.logit)
    moved, prob, _ = reference_ep(problem.X, problem.y, problem.coef_group, p0, v0, hyper.noise_var,
                                  v_inf=problem.v_inf_ratio * v0, n_iter=1, damping=1.0, sites=sites)
    size = np.sqrt(np.max(run.post.mean**2 + run.post.var))
    assert np.max(np.abs(moved - run.post.mean)) / size < ep.RESIDUAL_FACTOR * kw["tol"]
    assert np.max(np.abs(prob - run.group_prob)) < ep.RESIDUAL_FACTOR * kw["tol"]
    # and the parallel run's last iterate is not a fixed point by the same check
    sites = (parallel.sites.var, parallel.sites.mean, parallel.sites.logit)
    moved, _, _ = reference_ep(problem.X, problem.y, problem.coef_group, p0, v0, hyper.noise_var,
                               v_inf=problem.v_inf_ratio * v0, n_iter=1, damping=1.0, sites=sites)
    assert np.max(np.abs(moved - parallel.post.mean)) / size > ep.RESIDUAL_FACTOR * kw["tol"]


@pytest.mark.slow
def test_a_fit_that_is_read_gets_the_larger_fallback_budget_and_is_then_at_an_ep_fixed_point(monkeypatch):
    """E3 signal 7's learned cold fit (32 rows, a fit that is read) needs more of the fallback than the 50 outer
    steps a refit may take (measured: it stays short with 50). Its strict phase calls the fallback with the budget
    of fits that are read, and then, independently, one undamped update of the dense reference EP at the learned
    values barely moves its mean."""
    import adaptcs.models.spike_slab_ep as sse
    from adaptcs.models import GroupSpikeSlabEP
    from adaptcs.models._ep_learning import STRICT_FALLBACK_OUTER

    budgets, fits, fit = [], [], GroupSpikeSlabEP.fit

    def fallback(problem, hyper, sites, *, tol, max_outer=50, **kw):
        budgets.append(max_outer)
        return stable_ep(problem, hyper, sites, tol=tol, max_outer=max_outer, **kw)

    def recording(self, X, y):
        fits.append((fit(self, X, y), np.array(X), np.array(y)))
        return fits[-1][0]

    monkeypatch.setattr(sse, "stable_ep", fallback)
    monkeypatch.setattr(GroupSpikeSlabEP, "fit", recording)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_job("E3", 0, "gss_ep", "design", [7], hyperparameters="learned", n_steps=0)
    est, X, y = fits[0]
    assert STRICT_FALLBACK_OUTER > 50 and STRICT_FALLBACK_OUTER in budgets and est.converged_
    labels = np.unique(est.groups, return_inverse=True)[1]
    sites = (est.sites_.var, est.sites_.mean, est.sites_.logit)
    moved, prob, _ = reference_ep(X, y, labels, np.full(labels.max() + 1, est.p0_), est.v0_, est.noise_var_,
                                  v_inf=est.v_inf_ratio * est.v0_, n_iter=1, damping=1.0, sites=sites)
    size = np.sqrt(np.max(est.coef_**2 + est.coef_var_))
    assert np.max(np.abs(moved - est.coef_)) / size < ep.RESIDUAL_FACTOR * est.tol
    assert np.max(np.abs(prob - est.group_prob_)) < ep.RESIDUAL_FACTOR * est.tol


@pytest.mark.parametrize("stage", ["decoupled", "anderson"])
def test_on_independent_blocks_only_the_blocks_still_moving_are_factorised_and_it_reaches_the_dense_fixed_point(
        stage, monkeypatch):
    """Block-diagonal rows (three blocks of different difficulty, groups inside blocks): each stage of the fallback
    (the variance-decoupled loop, Anderson-accelerated EP) freezes a block once its strict test passes and
    refactorises only the rest, and ends at the fixed point of the dense reference EP run on the same rows written
    out densely."""
    from adaptcs.models._blocks import BlockPosterior, BlockRows

    rng = np.random.default_rng(2)
    B, r, b, size = 3, 8, 12, 2
    stacked = rng.normal(size=(B, r, b))
    stacked[0] *= 4.0  # a well-measured block converges first
    groups = np.repeat(np.arange(B * b // size), size)
    w = np.where(rng.random(B * b // size) < 0.3, 1.0, 0.0)[groups] * rng.normal(size=B * b)
    rows = BlockRows(stacked)
    y = rows.matvec(w) + 0.1 * rng.normal(size=B * r)
    G, p0, v0, s2 = groups.max() + 1, 0.3, 1.0, 0.01
    problem = ep.EPProblem(rows, y, groups, np.zeros(G), v_inf_ratio=100.0, damping=0.9, damping_decay=0.99)
    assert problem.group_block is not None
    hyper = ep.Hyper(np.array([np.log(p0 / (1 - p0))]), np.array([v0]), s2)
    prior = ep.EPSites.initial(np.full(B * b, p0), np.full(B * b, v0))
    partial = []
    original = BlockPosterior.updated

    def counting(self, model, prior_var, shift, blocks, **kwargs):
        partial.append(int(np.count_nonzero(blocks)))
        return original(self, model, prior_var, shift, blocks, **kwargs)

    monkeypatch.setattr(BlockPosterior, "updated", counting)
    if stage == "decoupled":
        run = decoupled_ep(problem, hyper, prior, tol=1e-9, max_outer=400)
    else:
        run = anderson_ep(problem, hyper, prior, tol=1e-9, max_iter=400)
    assert run.converged and partial and min(partial) < B  # some posteriors refactorised only some blocks
    mean, group_prob, _ = reference_ep(rows.dense(), y, groups, np.full(G, p0), v0, s2, v_inf=100.0 * v0)
    scale = np.max(np.abs(mean))
    np.testing.assert_allclose(run.post.mean, mean, atol=1e-6 * scale)
    np.testing.assert_allclose(run.groups.prob, group_prob, atol=1e-6)
