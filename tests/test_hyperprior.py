"""Weak priors on GSS-EP's learned values (type-II MAP, adaptcs.models._hyperprior).

Checked against independent ground truth: each M-step against a brute-force maximisation on a fine grid, the
learned point against finite differences of the re-converged EP evidence plus the log prior (it must be a
stationary point of that, not of the evidence alone), the units, and the design loop's centring.
"""

import warnings

import numpy as np
import pytest
from scipy.special import expit

from adaptcs.design import SequentialDesigner
from adaptcs.models import GroupSpikeSlabEP, Hyperprior
from adaptcs.models import _ep_learning as lrn

from conftest import random_group_problem

ALL = ("p0", "v0", "noise_var")


def grid_mode(objective, centre, half_width=30.0, points=600_001):
    t = np.linspace(centre - half_width, centre + half_width, points)
    return t[np.argmax(objective(t))]


@pytest.mark.parametrize("weight, moment, centre", [(30, 3.0, 0.0), (30, 0.003, np.log(0.25)), (2, 50.0, -3.0),
                                                     (0.0, 0.0, 1.5), (500, 1e-4, np.log(2.0))])
def test_scale_update_is_the_mode_of_em_term_plus_prior(weight, moment, centre):
    prior = Hyperprior(spread=5.0)

    def objective(t):
        return -0.5 * weight * t - 0.5 * moment * np.exp(-t) - 0.5 * prior.precision * (t - centre) ** 2

    found = np.log(prior.scale_update(weight, moment, centre))
    assert found == pytest.approx(grid_mode(objective, centre), abs=1e-4)


def test_level_update_is_the_mode_of_em_term_plus_prior(rng):
    prior = Hyperprior()
    for _ in range(5):
        offsets = rng.normal(0.0, 1.0, 20)
        q = rng.uniform(size=20) ** 3
        centre = rng.normal(-1.0, 1.0)

        def objective(levels, offsets=offsets, q=q, centre=centre):
            p = expit(levels[:, None] + offsets)
            return np.sum(q * np.log(p) + (1 - q) * np.log1p(-p), axis=1) \
                - 0.5 * prior.precision * (levels - centre) ** 2

        found = prior.level_update(float(q.sum()), lambda lv, offsets=offsets: lv + offsets, centre)
        assert found == pytest.approx(grid_mode(objective, centre, points=200_001), abs=2e-4)


def test_map_learning_is_stationary_in_evidence_plus_log_prior(rng):
    """The learned point maximises the EP evidence plus the log prior, checked by finite differences of the
    re-converged evidence; the evidence alone is far from stationary there (the prior moved the answer)."""
    checked, moved_by_prior = 0, []
    for _ in range(6):
        X, y, groups, _w = random_group_problem(rng, 40, 6, 3, 0.3, p0=0.4, v0=0.8)
        _labels, coef_group = np.unique(groups, return_inverse=True)
        problem = lrn.EPProblem(X, y, coef_group, np.zeros(6), v_inf_ratio=300.0, damping=0.5, damping_decay=1.0)
        problem.hyperprior = Hyperprior(noise_var=3.0, p0=0.1, v0=4.0, spread=1.5)  # centres far off, strong
        start = lrn.Hyper(0.0, 1.0, 0.5)
        learned = lrn.learn_evidence(problem, start, ALL)
        run = problem.run(learned.hyper, learned.run.sites, tol=1e-12, max_iter=20000)
        if not run.converged or np.any(run.sites.var >= 0.99 * problem.v_inf_ratio * learned.hyper.v0):
            continue  # clamped sites: the EM-like fixed point is not stationary there (docs/learning.md)
        checked += 1
        h = 1e-5
        for k in range(3):
            evidence, total = [], []
            for sign in (1.0, -1.0):
                phi = learned.hyper.phi()
                phi[k] += sign * h
                moved = lrn.Hyper.from_phi(phi, 1)
                ev = problem.run(moved, run.sites, tol=1e-13, max_iter=20000).log_evidence
                evidence.append(ev)
                total.append(ev + problem.hyperprior.log_density(problem, moved))
            d_evidence = (evidence[0] - evidence[1]) / (2 * h)
            d_total = (total[0] - total[1]) / (2 * h)
            moved_by_prior.append(abs(d_evidence))
            assert abs(d_total) < 0.02 * abs(d_evidence) + 0.02, (k, d_total, d_evidence)
    assert checked >= 3
    assert np.median(moved_by_prior) > 1.0  # the prior matters: the evidence alone is not stationary there


def test_no_centre_is_type_ii_maximum_likelihood(rng):
    X, y, groups, _w = random_group_problem(rng, 60, 8, 3, 0.25)
    ml = GroupSpikeSlabEP(groups, learn=ALL, hyperprior=None).fit(X, y)
    empty = GroupSpikeSlabEP(groups, learn=ALL, hyperprior=Hyperprior()).fit(X, y)
    auto = GroupSpikeSlabEP(groups, learn=ALL).fit(X, y)  # "auto" outside a design loop: ML
    for est in (empty, auto):
        np.testing.assert_array_equal(est.coef_, ml.coef_)
        assert (est.noise_var_, est.v0_, est.p0_) == (ml.noise_var_, ml.v0_, ml.p0_)


def test_a_strong_prior_pins_the_value_and_follows_the_units(rng):
    X, y, groups, _w = random_group_problem(rng, 60, 8, 3, 0.25)
    pinned = GroupSpikeSlabEP(groups, learn=ALL, hyperprior=Hyperprior(noise_var=2.0, spread=1.001)).fit(X, y)
    assert pinned.noise_var_ == pytest.approx(2.0, rel=1e-3)
    c = 2.0 ** 20 * 3.0  # not a power of two: the fit's own rescaling does not undo it
    scaled = GroupSpikeSlabEP(groups, learn=ALL, hyperprior=Hyperprior(noise_var=2.0 * c**2, spread=1.001)) \
        .fit(X, c * y)
    assert scaled.noise_var_ == pytest.approx(2.0 * c**2, rel=1e-3)
    np.testing.assert_allclose(scaled.coef_ / c, pinned.coef_, rtol=1e-3, atol=1e-6 * np.max(np.abs(pinned.coef_)))


def test_a_design_loop_centres_the_prior_after_the_random_start():
    """From the first refit after ceil(d / 16) rows on, weak priors centred on the values learned at that point."""
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(16), 4)  # d = 64: centred once 4 rows are told
    w = np.where(groups < 3, rng.normal(size=64), 0.0)
    designer = SequentialDesigner(GroupSpikeSlabEP(groups, learn=ALL), rng=0, n_random_start=0)
    ml = SequentialDesigner(GroupSpikeSlabEP(groups, learn=ALL, hyperprior=None), rng=0, n_random_start=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(6):
            for loop in (designer, ml):
                row = loop.ask()
                loop.tell(row, row @ w + 0.1 * rng.normal())
            est = designer.estimator_
            if i <= 3:
                assert est.hyperprior == "auto"  # type-II ML up to and including the fit on 4 rows
            if i == 3:
                learned = (est.noise_var_, est.p0_, est.v0_)
            if i == 4:  # the next refit is centred on what the fit on 4 rows learned
                centred = est.hyperprior
                assert isinstance(centred, Hyperprior)
                assert (centred.noise_var, centred.p0, centred.v0) == learned
    assert designer.estimator_.hyperprior is centred  # kept for the rest of the loop
    assert ml.estimator_.hyperprior is None
    assert designer.estimator.hyperprior == "auto"  # the template is not touched


@pytest.mark.parametrize("kwargs", [{"noise_var": -1.0}, {"noise_var": [1.0, 2.0]}, {"p0": 1.0}, {"p0": [0.2, 0.0]},
                                    {"v0": np.inf}, {"spread": 1.0}, {"spread": True}, {"spread": np.nan}])
def test_bad_hyperpriors_are_refused(kwargs):
    with pytest.raises(ValueError, match="Hyperprior"):
        Hyperprior(**kwargs)


def test_the_estimator_refuses_an_unknown_hyperprior(rng):
    X, y, groups, _w = random_group_problem(rng, 20, 4, 2, 0.25)
    with pytest.raises(ValueError, match="hyperprior"):
        GroupSpikeSlabEP(groups, hyperprior="weak").fit(X, y)


def test_values_that_crawl_are_accelerated_to_a_checked_fixed_point():
    """E3's signal 35 on its 32 first rows, everything learned: the joint run stops short (the values still move
    by more than 0.01 per EM-like step); SQUAREM takes them to a point that an independent check confirms: EP run
    afresh from the prior's sites at the learned values (constant damping) reaches the same posterior, and one
    EM-like step from there moves no value by more than 0.01 in log units."""
    from adaptcs.experiments.synthetic import synthetic_case
    from adaptcs.models._scaling import DataScale

    case = synthetic_case("E3", 0, 35)
    X, y = case.problem.X, case.problem.y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = GroupSpikeSlabEP(case.fit_groups, learn=ALL).fit(X, y)
    assert est.converged_ and est.learn_converged_
    fresh = GroupSpikeSlabEP(case.fit_groups, p0=est.p0_, v0=est.v0_, noise_var=est.noise_var_, damping=0.1,
                             damping_decay=1.0, max_iter=5000).fit(X, y)
    assert fresh.converged_
    np.testing.assert_allclose(fresh.coef_, est.coef_, atol=2e-3 * np.max(np.abs(est.coef_)))
    scale = DataScale.of(X, y)
    _labels, coef_group = np.unique(case.fit_groups, return_inverse=True)
    problem = lrn.EPProblem(X / scale.x, y / scale.y, coef_group, np.zeros(coef_group.max() + 1), v_inf_ratio=300.0,
                            damping=0.1, damping_decay=1.0)
    hyper = lrn.Hyper(np.log(est.p0_ / (1 - est.p0_)), est.v0_, est.noise_var_).scaled(scale)
    run = problem.run(hyper, tol=1e-6, max_iter=20000)
    assert run.converged
    assert lrn.em_step(problem, hyper, run, ALL) < 0.01
