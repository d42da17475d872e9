"""Anderson-accelerated EP (the fallback's last stage), against the dense EP of tests/reference_ep.py: the fixed
point it reaches on small problems (on independent blocks: tests/test_ep_decoupled.py, beside the decoupled stage),
and, where the damped parallel schedule and the variance-decoupled loop both leave the fit circling, a point that
one undamped update of the reference does not move."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import expit

import adaptcs.models._ep as ep
from adaptcs.models._ep_anderson import anderson_ep
from adaptcs.models._ep_decoupled import decoupled_ep
from adaptcs.models._ep_fallback import stable_ep

from reference_ep import reference_ep as _reference_ep


def reference_ep(*args, **kwargs):
    with np.errstate(divide="ignore", invalid="ignore"):
        return _reference_ep(*args, **kwargs)


def _problem(seed: int, n: int | None = None, s2: float | None = None, p0: float | None = None):
    """A signal of 10 groups of 3 with 3 on, rows X (n, 30), its noisy measurements, and EP's problem (v0 = 1,
    v_inf = 300 v0, as the estimators). Not given, n (8-19), the noise variance (1e-4, 1e-3 or 1e-2) and p0 (0.1
    or 0.3) are drawn from the seed's Generator too (as the search that found the hard seeds drew them)."""
    rng = np.random.default_rng(seed)
    drawn_n = int(rng.integers(8, 20))
    n = drawn_n if n is None else n
    G, size = 10, 3
    groups = np.repeat(np.arange(G), size)
    w = np.zeros(G * size)
    for g in rng.choice(G, 3, replace=False):
        w[groups == g] = rng.normal(size=size)
    X = rng.normal(size=(n, G * size))
    drawn_s2 = float(rng.choice([1e-4, 1e-3, 1e-2]))
    s2 = drawn_s2 if s2 is None else s2
    y = X @ w + np.sqrt(s2) * rng.normal(size=n)
    drawn_p0 = float(rng.choice([0.1, 0.3]))
    p0 = drawn_p0 if p0 is None else p0
    problem = ep.EPProblem(X, y, groups, np.zeros(G), v_inf_ratio=300.0, damping=0.9, damping_decay=0.99)
    hyper = ep.Hyper(np.array([np.log(p0 / (1 - p0))]), np.array([1.0]), s2)
    return problem, hyper, ep.EPSites.initial(np.full(G * size, p0), np.ones(G * size))


def _moved_by_one_reference_update(problem, hyper, run):
    """How far one undamped update of the dense reference EP from ``run``'s sites moves its mean (relative to the
    largest coefficient) and its group probabilities."""
    p0, v0 = expit(problem.prior_logit(hyper)), problem.slab_var(hyper)
    sites = (run.sites.var, run.sites.mean, run.sites.logit)
    moved, prob, _ = reference_ep(problem.X, problem.y, problem.coef_group, p0, v0, hyper.noise_var,
                                  v_inf=problem.v_inf_ratio * v0, n_iter=1, damping=1.0, sites=sites)
    size = np.sqrt(np.max(run.post.mean**2 + run.post.var))
    return np.max(np.abs(moved - run.post.mean)) / size, np.max(np.abs(prob - run.groups.prob))


@pytest.mark.parametrize(("seed", "n"), [(0, 14), (1, 14), (2, 20)])
def test_it_reaches_the_dense_reference_fixed_point(seed, n):
    problem, hyper, prior = _problem(seed, n, 0.01, 0.3)
    run = anderson_ep(problem, hyper, prior, tol=1e-8, max_iter=400)
    X, groups = problem.X, problem.coef_group
    mean, group_prob, _ = reference_ep(X, problem.y, groups, np.full(groups.max() + 1, 0.3), 1.0, 0.01,
                                       v_inf=300.0)
    assert run.converged
    np.testing.assert_allclose(run.post.mean, mean, atol=1e-6 * np.max(np.abs(mean)))
    np.testing.assert_allclose(run.groups.prob, group_prob, atol=1e-6)


@pytest.mark.parametrize("seed", [343, 356])
def test_where_damping_and_decoupling_circle_it_reaches_a_point_the_reference_update_keeps(seed):
    """Underdetermined problems (8 rows, 30 coefficients, noise variance 1e-3 or 1e-4, p0 = 0.1) found by a search
    over seeds: the damped parallel schedule and 200 variance-decoupled outer steps both end circling (one
    reference update moves them by more than 10 tol); from the parallel run's end Anderson's updates reach a point
    the reference's update does not move."""
    problem, hyper, prior = _problem(seed)
    assert problem.n == 8 and hyper.noise_var <= 1e-3
    tol = 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallel = ep.run_ep(problem, hyper, prior, tol=tol, max_iter=1000)
        decoupled = decoupled_ep(problem, hyper, parallel.sites, tol=tol, max_outer=200)
        run = anderson_ep(problem, hyper, parallel.sites, tol=tol, max_iter=300)
    assert not parallel.converged and not decoupled.converged and run.converged
    assert max(_moved_by_one_reference_update(problem, hyper, decoupled)) > ep.RESIDUAL_FACTOR * tol
    moved_mean, moved_prob = _moved_by_one_reference_update(problem, hyper, run)
    assert moved_mean < tol and moved_prob < tol


def test_the_fallback_takes_anderson_where_decoupling_fails_and_run_ep_keeps_its_point(monkeypatch):
    import adaptcs.models._ep_fallback as fallback

    calls = []

    def recording(*args, **kw):
        calls.append(anderson_ep(*args, **kw))
        return calls[-1]

    monkeypatch.setattr(fallback, "anderson_ep", recording)
    problem, hyper, prior = _problem(356)
    tol = 1e-6
    problem.fallback = stable_ep
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = ep.run_ep(problem, hyper, prior, tol=tol, max_iter=5000)  # the decaying damping ends the run
    assert run.converged and run.n_fallback > 0 and calls and calls[-1].converged
    moved_mean, moved_prob = _moved_by_one_reference_update(problem, hyper, run)
    assert moved_mean < ep.RESIDUAL_FACTOR * tol and moved_prob < ep.RESIDUAL_FACTOR * tol


def test_a_step_that_would_make_a_site_precision_negative_is_replaced_by_a_damped_plain_step():
    from adaptcs.models._ep_anderson import SAFE_STEP, _safeguarded

    b = 2
    x = np.tile(np.array([0.5, -0.5, 1.0, 2.0, 0.0, 0.1]), (3, 1))  # 3 blocks of (h, h, pi, pi, pt, pt)
    g = np.full((3, 6), -1.0)
    proposed = x + np.array([[0.1] * 6, [0.0, 0.0, -3.0, 0.0, 0.0, 0.0], [np.nan] + [0.0] * 5])
    out, bad = _safeguarded(proposed, x, g, b)
    np.testing.assert_array_equal(bad, [False, True, True])
    np.testing.assert_array_equal(out[0], proposed[0])
    np.testing.assert_allclose(out[1:], x[1:] + SAFE_STEP * g[1:])
    assert np.all(out[:, b:2 * b] > 0)


def test_where_anderson_fails_from_the_decoupled_end_it_restarts_the_blocks_still_moving_from_the_start(
        monkeypatch):
    """The fallback's last stage: Anderson again, with the blocks the second stage left moving back at the sites the
    fallback started from and the blocks at their fixed points kept where they are."""
    import adaptcs.models._ep_fallback as fallback
    from adaptcs.models._blocks import BlockRows
    from adaptcs.models._ep_decoupled import FallbackRun

    rng = np.random.default_rng(4)
    B, r, b = 3, 5, 6
    rows = BlockRows(rng.normal(size=(B, r, b)))
    groups = np.repeat(np.arange(B * b // 2), 2)
    problem = ep.EPProblem(rows, rng.normal(size=B * r), groups, np.zeros(B * b // 2), v_inf_ratio=100.0,
                           damping=0.9, damping_decay=0.99)
    hyper = ep.Hyper(np.array([0.0]), np.array([1.0]), 0.1)
    start = ep.EPSites.initial(np.full(B * b, 0.5), np.full(B * b, 1.0))
    moved = ep.EPSites(var=np.full(B * b, 2.0), mean=np.full(B * b, 3.0), logit=np.full(B * b, 4.0))
    starts = []

    def failing(problem, hyper, sites, *, tol):
        starts.append(sites)
        done = np.array([True, False, True])
        return FallbackRun(moved, None, None, False, 1.0, 1, 10, done)

    monkeypatch.setattr(fallback, "decoupled_ep", lambda *args, **kw: failing(*args[:3], tol=kw["tol"]))
    monkeypatch.setattr(fallback, "anderson_ep", failing)
    run = stable_ep(problem, hyper, start, tol=1e-6)
    assert len(starts) == 3 and not run.converged and run.n_posteriors == 30
    restart, second_block = starts[2], np.arange(B * b) // b == 1
    for name in ("var", "mean", "logit"):
        np.testing.assert_array_equal(getattr(restart, name)[second_block], getattr(start, name)[second_block])
        np.testing.assert_array_equal(getattr(restart, name)[~second_block], getattr(moved, name)[~second_block])
