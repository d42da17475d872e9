"""GSS-EP and SS-EP against exact ground truth: closed-form tilted moments, cases where EP is exact,
enumeration of all 2^G group patterns, and the p0 -> 0 / p0 -> 1 limits."""

import copy
import warnings
from dataclasses import replace

import numpy as np
import pytest
from scipy.special import expit
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from adaptcs.models import GroupSpikeSlabEP, SpikeSlabEP, exact_group_spike_slab
from adaptcs.models._ep import _Cavity, _matched_sites

from conftest import random_group_problem
from reference_ep import reference_ep


def normal_pdf0(mean, var):
    return np.exp(-0.5 * mean**2 / var) / np.sqrt(2 * np.pi * var)


# --- the site update -------------------------------------------------------------------------------------


def test_clamped_sites_counted_where_the_exact_posterior_is_wider_than_the_likelihood():
    """One coefficient, one row: the cavity of the only site is the likelihood N(w | y, s2), so the matched site
    variance is negative (the site is clamped) exactly where the exact posterior variance, in closed form, exceeds
    s2; n_clamped_sites_ must say so (bimodal posteriors at intermediate y, none at small or large y)."""
    s2, v0, p0 = 0.01, 1.0, 0.1
    counted, expected = [], []
    for y in np.linspace(0.0, 1.5, 31):
        slab = p0 * normal_pdf0(y, s2 + v0)
        r1 = slab / (slab + (1 - p0) * normal_pdf0(y, s2))
        mean1, var1 = y * v0 / (v0 + s2), v0 * s2 / (v0 + s2)
        exact_var = r1 * (var1 + mean1**2) - (r1 * mean1) ** 2
        if abs(exact_var - s2) < 1e-6 * s2:  # on the boundary rounding decides
            continue
        est = GroupSpikeSlabEP([0], p0=p0, v0=v0, noise_var=s2).fit(np.ones((1, 1)), [y])
        counted.append(est.n_clamped_sites_)
        expected.append(int(exact_var > s2))
    assert counted == expected
    assert 0 < sum(expected) < len(expected)  # both cases occur


def test_matched_site_reproduces_tilted_moments(rng):
    """Cavity x new site must have the mean, variance and z-probability of cavity x exact factor.

    The tilted distribution is a two-component mixture with closed-form moments: a slab part
    N(mc v0 / (vc + v0), vc v0 / (vc + v0)) and a point mass at zero.
    """
    d, v0 = 2000, 0.8
    vc = rng.uniform(0.01, 3.0, d)
    mc = rng.normal(0.0, 1.5, d)
    pc = rng.normal(0.0, 2.0, d)
    site = _matched_sites(_Cavity(vc, mc, pc, np.ones(d, bool)), v0=v0, v_inf=1e4)

    w_slab = expit(pc) * normal_pdf0(mc, vc + v0)
    w_spike = expit(-pc) * normal_pdf0(mc, vc)
    r1 = w_slab / (w_slab + w_spike)
    slab_mean, slab_var = mc * v0 / (vc + v0), vc * v0 / (vc + v0)
    tilted_mean = r1 * slab_mean
    tilted_var = r1 * (slab_var + slab_mean**2) - tilted_mean**2

    new_var = 1.0 / (1.0 / vc + 1.0 / site.var)
    new_mean = new_var * (mc / vc + site.mean / site.var)
    np.testing.assert_allclose(expit(pc + site.logit), r1, rtol=1e-10)
    np.testing.assert_allclose(new_mean, tilted_mean, rtol=1e-8, atol=1e-10)
    unclamped = site.var != 1e4
    assert unclamped.mean() > 0.5
    np.testing.assert_allclose(new_var[unclamped], tilted_var[unclamped], rtol=1e-7)
    # Where the tilted variance exceeds the cavity's, no positive site can match it: clamp, keep the mean.
    assert np.all(tilted_var[~unclamped] >= vc[~unclamped] * (1 - 1e-9))


def test_slab_only_site_is_the_slab():
    """With the slab certain (r1 = 1) the matched site is exactly the slab N(0, v0)."""
    site = _matched_sites(_Cavity(np.array([0.5]), np.array([0.3]), np.array([60.0]), np.array([True])),
                          v0=2.0, v_inf=100.0)
    assert site.var[0] == pytest.approx(2.0, rel=1e-9)
    assert site.mean[0] == pytest.approx(0.0, abs=1e-9)


# --- cases where EP is exact --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_single_coefficient_is_exact(seed):
    """With one site EP matches the exact posterior moments and evidence."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(7, 1))
    y = 0.8 * X[:, 0] + rng.normal(size=7)
    exact = exact_group_spike_slab(X, y, [0], 0.3, 2.0, 0.9)
    ep = SpikeSlabEP(p0=0.3, v0=2.0, noise_var=0.9, tol=1e-12, max_iter=5000).fit(X, y)
    np.testing.assert_allclose(ep.coef_, exact.mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ep.group_prob_, exact.group_prob, rtol=1e-8, atol=1e-10)
    assert ep.log_evidence_ == pytest.approx(exact.log_evidence, abs=1e-8)


@pytest.mark.parametrize("seed", range(4))
def test_ss_ep_is_exact_for_orthogonal_columns(seed):
    """Orthogonal columns decouple the coefficients, so SS-EP is exact (mean, probabilities, evidence)."""
    rng = np.random.default_rng(seed)
    n, d, s2, v0 = 12, 7, 0.5, 1.3
    Q, _ = np.linalg.qr(rng.normal(size=(n, d)))
    X = Q * rng.uniform(0.5, 3.0, d)
    w = rng.normal(size=d) * (rng.random(d) < 0.5)
    y = X @ w + rng.normal(0.0, np.sqrt(s2), n)
    p0 = rng.uniform(0.1, 0.9, d)
    exact = exact_group_spike_slab(X, y, np.arange(d), p0, v0, s2)
    ep = SpikeSlabEP(p0=p0, v0=v0, noise_var=s2, tol=1e-12, max_iter=5000).fit(X, y)
    assert ep.converged_
    np.testing.assert_allclose(ep.coef_, exact.mean, atol=1e-8)
    np.testing.assert_allclose(ep.group_prob_, exact.group_prob, atol=1e-8)
    assert ep.log_evidence_ == pytest.approx(exact.log_evidence, abs=1e-8)
    # damping blends a clamped site towards v_inf_ratio * v0 only geometrically
    unclamped = ep.sites_.var < 0.5 * ep.v_inf_ratio * 1.3
    np.testing.assert_allclose(ep.coef_var_[unclamped], exact.var[unclamped], rtol=1e-7)


# --- group EP against enumeration ------------------------------------------------------------------------


def _ep_vs_exact(n_over_d, n_groups, group_size, noise_var, n_problems, seed):
    rng = np.random.default_rng(seed)
    d = n_groups * group_size
    n = int(round(n_over_d * d))
    evidence_err, prob_err, mean_err = [], [], []
    for _ in range(n_problems):
        X, y, groups, _w = random_group_problem(rng, n, n_groups, group_size, noise_var)
        exact = exact_group_spike_slab(X, y, groups, 0.3, 1.0, noise_var)
        ep = GroupSpikeSlabEP(groups, p0=0.3, v0=1.0, noise_var=noise_var, tol=1e-8, max_iter=3000).fit(X, y)
        evidence_err.append(abs(ep.log_evidence_ - exact.log_evidence))
        prob_err.append(np.max(np.abs(ep.group_prob_ - exact.group_prob)))
        mean_err.append(np.linalg.norm(ep.coef_ - exact.mean) / max(np.linalg.norm(exact.mean), 1e-12))
    return np.array(evidence_err), np.array(prob_err), np.array(mean_err)


# Median tolerances per regime (evidence in nats, probability, relative mean error). EP's own error grows
# when the data leave group membership ambiguous (fewer rows than coefficients, unit noise); a wrong
# formula gives errors of 0.15 nats and more in every regime (checked by mutating the engine).
MEDIAN_TOL = {
    (0.75, 0.05): (0.03, 0.03, 0.02), (0.75, 1.0): (0.2, 0.1, 0.25),
    (1.5, 0.05): (0.03, 0.03, 0.02), (1.5, 1.0): (0.06, 0.06, 0.06),
    (4.0, 0.05): (0.01, 0.01, 0.01), (4.0, 1.0): (0.02, 0.02, 0.02),
}


@pytest.mark.parametrize("n_over_d, noise_var", list(MEDIAN_TOL))
@pytest.mark.parametrize("n_groups, group_size", [(4, 3), (8, 2)])
def test_group_ep_close_to_enumeration(n_over_d, noise_var, n_groups, group_size):
    """EP is approximate, but on typical problems it lands very close to the exact posterior."""
    ev, prob, mean = _ep_vs_exact(n_over_d, n_groups, group_size, noise_var, n_problems=12,
                                  seed=int(100 * n_over_d + 10 * n_groups + 1000 * noise_var))
    tol_ev, tol_prob, tol_mean = MEDIAN_TOL[n_over_d, noise_var]
    assert np.median(ev) < tol_ev, ev
    assert np.median(prob) < tol_prob, prob
    assert np.median(mean) < tol_mean, mean
    if n_over_d >= 4:  # well posed: every problem, not just the typical one
        assert prob.max() < 0.1 and mean.max() < 0.05, (prob, mean)


@pytest.mark.parametrize("seed", range(6))
def test_fixed_point_equals_dense_reference_ep(seed):
    """Same fixed point (mean, group probabilities, evidence) as an independent dense EP (reference_ep.py),
    on problems with ambiguous groups and clamped sites, where a wrong group cavity would show."""
    rng = np.random.default_rng(seed)
    noise_var = [1.0, 0.3][seed % 2]
    X, y, groups, _w = random_group_problem(rng, [10, 16, 30][seed % 3], 5, 3, noise_var)
    mean, group_prob, log_evidence = reference_ep(X, y, groups, np.full(5, 0.3), 1.0, noise_var, v_inf=300.0)
    ep = GroupSpikeSlabEP(groups, p0=0.3, v0=1.0, noise_var=noise_var, damping=0.5, damping_decay=1.0, tol=1e-11,
                          max_iter=5000).fit(X, y)
    assert ep.converged_
    np.testing.assert_allclose(ep.coef_, mean, atol=1e-9)
    np.testing.assert_allclose(ep.group_prob_, group_prob, atol=1e-9)
    assert ep.log_evidence_ == pytest.approx(log_evidence, abs=1e-8)


def test_default_schedule_reaches_the_reference_fixed_point():
    """The paper's decaying damping stops at tol, close to the same fixed point."""
    rng = np.random.default_rng(7)
    X, y, groups, _w = random_group_problem(rng, 16, 5, 3, 0.3)
    mean, group_prob, log_evidence = reference_ep(X, y, groups, np.full(5, 0.3), 1.0, 0.3, v_inf=300.0)
    ep = GroupSpikeSlabEP(groups, p0=0.3, v0=1.0, noise_var=0.3).fit(X, y)
    np.testing.assert_allclose(ep.coef_, mean, atol=1e-3)
    np.testing.assert_allclose(ep.group_prob_, group_prob, atol=1e-3)
    assert ep.log_evidence_ == pytest.approx(log_evidence, abs=1e-2)


@pytest.mark.parametrize("form_n", [6, 30])  # n < d (Woodbury) and n >= d (direct)
def test_p0_to_one_is_bayesian_linear_regression(rng, form_n):
    d, s2, v0 = 10, 0.4, 1.7
    X = rng.normal(size=(form_n, d))
    y = X @ rng.normal(size=d) + rng.normal(0.0, np.sqrt(s2), form_n)
    groups = np.arange(d) // 2
    ep = GroupSpikeSlabEP(groups, p0=1 - 1e-12, v0=v0, noise_var=s2, tol=1e-10).fit(X, y)
    V = np.linalg.inv(X.T @ X / s2 + np.eye(d) / v0)
    np.testing.assert_allclose(ep.coef_, V @ X.T @ y / s2, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ep.coef_var_, np.diag(V), rtol=1e-6)
    cov_y = s2 * np.eye(form_n) + v0 * X @ X.T
    exact_ev = -0.5 * (form_n * np.log(2 * np.pi) + np.linalg.slogdet(cov_y)[1] + y @ np.linalg.solve(cov_y, y))
    assert ep.log_evidence_ == pytest.approx(exact_ev, abs=1e-6)
    np.testing.assert_allclose(ep.group_prob_, 1.0, atol=1e-9)


def test_p0_to_zero_switches_everything_off(rng):
    X, y, groups, _w = random_group_problem(rng, 12, 6, 3, 0.5)
    ep = GroupSpikeSlabEP(groups, p0=1e-100, v0=1.0, noise_var=0.5).fit(X, y)
    assert np.max(np.abs(ep.coef_)) < 1e-6
    assert np.max(ep.group_prob_) < 1e-6


# --- consistency of the estimator ---------------------------------------------------------------------


def test_singleton_groups_equal_spike_slab_ep(rng):
    X, y, _groups, _w = random_group_problem(rng, 15, 20, 1, 0.3)
    d = X.shape[1]
    labels = [f"coef{j:03d}" for j in range(d)]  # string labels, sorted order = column order
    p0 = rng.uniform(0.05, 0.5, d)
    gss = GroupSpikeSlabEP(labels, p0=p0, v0=1.0, noise_var=0.3).fit(X, y)
    ss = SpikeSlabEP(p0=p0, v0=1.0, noise_var=0.3).fit(X, y)
    np.testing.assert_allclose(gss.coef_, ss.coef_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gss.group_prob_, ss.group_prob_, rtol=1e-12, atol=1e-14)
    assert gss.log_evidence_ == pytest.approx(ss.log_evidence_, abs=1e-10)
    assert gss.n_iter_ == ss.n_iter_


def test_labels_are_mapped_in_sorted_order(rng):
    X, y, groups, _w = random_group_problem(rng, 12, 3, 2, 0.3)
    names = np.array(["c", "a", "b"])[groups]
    p0_by_sorted = np.array([0.2, 0.4, 0.6])  # for labels a, b, c
    by_name = GroupSpikeSlabEP(names, p0=p0_by_sorted, v0=1.0, noise_var=0.3).fit(X, y)
    # Same problem with the equivalent integer labels 0 (a), 1 (b), 2 (c).
    as_int = np.searchsorted(["a", "b", "c"], names)
    by_int = GroupSpikeSlabEP(as_int, p0=p0_by_sorted, v0=1.0, noise_var=0.3).fit(X, y)
    np.testing.assert_array_equal(by_name.group_labels_, ["a", "b", "c"])
    np.testing.assert_allclose(by_name.group_prob_, by_int.group_prob_)
    # Permuting the columns (and their labels) permutes the answer.
    perm = rng.permutation(X.shape[1])
    permuted = GroupSpikeSlabEP(names[perm], p0=p0_by_sorted, v0=1.0, noise_var=0.3).fit(X[:, perm], y)
    np.testing.assert_allclose(permuted.coef_, by_name.coef_[perm], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(permuted.group_prob_, by_name.group_prob_, rtol=1e-10)


@pytest.mark.parametrize("n", [8, 40])
def test_cov_matvec_and_predict_match_dense_posterior(rng, n):
    X, y, groups, _w = random_group_problem(rng, n, 6, 3, 0.5)
    ep = GroupSpikeSlabEP(groups, p0=0.3, v0=1.0, noise_var=0.5).fit(X, y)
    sites = ep.sites_
    V = np.linalg.inv(X.T @ X / 0.5 + np.diag(1.0 / sites.var))
    np.testing.assert_allclose(ep.coef_, V @ (X.T @ y / 0.5 + sites.mean / sites.var), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ep.coef_var_, np.diag(V), rtol=1e-8)
    v, block = rng.normal(size=18), rng.normal(size=(18, 4))
    np.testing.assert_allclose(ep.cov_matvec(v), V @ v, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ep.cov_matvec(block), V @ block, rtol=1e-8, atol=1e-10)

    X_new = rng.normal(size=(5, 18))
    mean, std = ep.predict(X_new, return_std=True)
    np.testing.assert_allclose(mean, X_new @ ep.coef_)
    np.testing.assert_allclose(std, np.sqrt(np.einsum("ij,jk,ik->i", X_new, V, X_new) + 0.5), rtol=1e-8)
    np.testing.assert_allclose(ep.predict(X_new), mean)


def test_warm_start_converges_faster_to_the_same_answer(rng):
    X, y, groups, _w = random_group_problem(rng, 30, 10, 4, 0.5, p0=0.2)
    x_new = rng.normal(size=40)
    X_more = np.vstack([X, x_new])
    y_more = np.append(y, x_new @ _w + rng.normal(0.0, np.sqrt(0.5)))
    cold = GroupSpikeSlabEP(groups, p0=0.2, v0=1.0, noise_var=0.5, tol=1e-6).fit(X_more, y_more)
    warm = GroupSpikeSlabEP(groups, p0=0.2, v0=1.0, noise_var=0.5, tol=1e-6, warm_start=True).fit(X, y)
    warm.fit(X_more, y_more)
    assert warm.converged_ and cold.converged_
    assert warm.n_iter_ < cold.n_iter_
    np.testing.assert_allclose(warm.coef_, cold.coef_, atol=1e-3)
    np.testing.assert_allclose(warm.group_prob_, cold.group_prob_, atol=1e-3)


def test_warm_start_rejects_a_different_dimension(rng):
    est = SpikeSlabEP(p0=0.3, warm_start=True).fit(rng.normal(size=(5, 8)), rng.normal(size=5))
    with pytest.raises(ValueError, match="warm_start"):
        est.fit(rng.normal(size=(5, 9)), rng.normal(size=5))


def test_non_convergence_is_reported(rng):
    X, y, groups, _w = random_group_problem(rng, 10, 5, 2, 0.5)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        est = GroupSpikeSlabEP(groups, p0=0.3, v0=1.0, noise_var=1.0, max_iter=2).fit(X, y)
    assert not est.converged_ and est.n_iter_ == 2


def test_convergence_is_silent(rng):
    X, y, groups, _w = random_group_problem(rng, 20, 5, 2, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = GroupSpikeSlabEP(groups, p0=0.3).fit(X, y)
    assert est.converged_ and 1 <= est.n_iter_ < est.max_iter


def test_sklearn_clone_and_params():
    est = GroupSpikeSlabEP([0, 0, 1], p0=0.2, v0=2.0, tol=1e-6)
    copy = clone(est)
    assert copy.get_params()["v0"] == 2.0 and copy.get_params()["tol"] == 1e-6
    assert "groups" not in SpikeSlabEP().get_params()


def test_unfitted_estimator_refuses_products():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        SpikeSlabEP().cov_matvec(np.ones(3))


# --- bad input ---------------------------------------------------------------------------------------------

GOOD_X = np.arange(12.0).reshape(3, 4) / 10
GOOD_Y = np.array([0.1, -0.2, 0.3])
GOOD_GROUPS = [0, 0, 1, 1]


@pytest.mark.parametrize("kwargs, X, y, match", [
    ({}, GOOD_X[0], GOOD_Y, "Expected 2D array, got 1D array"),
    ({}, GOOD_X, GOOD_Y[:2], r"inconsistent numbers of samples: \[3, 2\]"),
    ({}, GOOD_X, np.ones((3, 2)), "y should be a 1d array"),
    ({}, np.where(GOOD_X > 0.5, np.nan, GOOD_X), GOOD_Y, "X contains NaN"),
    ({}, GOOD_X, np.array([0.0, np.inf, 1.0]), "Input y contains infinity"),
    ({}, np.zeros((0, 4)), np.zeros(0), r"0 sample\(s\)"),
    ({}, GOOD_X.astype(str), GOOD_Y, "X must be numeric"),
    ({"groups": [0, 0, 1]}, GOOD_X, GOOD_Y, "groups has 3 labels but X has 4 columns"),
    ({"groups": [0.0, 0.5, 1.0, 1.0]}, GOOD_X, GOOD_Y, "groups must hold integer"),
    ({"groups": 3}, GOOD_X, GOOD_Y, "contiguous groups of 3 coefficients must divide the 4 columns"),
    ({"groups": [1, "1", 2, 2]}, GOOD_X, GOOD_Y, "groups mixes labels of different kinds"),
    ({"groups": [True, 1, 2, 2]}, GOOD_X, GOOD_Y, "groups mixes labels of different kinds"),
    ({"p0": 0.0}, GOOD_X, GOOD_Y, "'p0' parameter of GroupSpikeSlabEP must be"),
    ({"p0": 1.0}, GOOD_X, GOOD_Y, "'p0' parameter of GroupSpikeSlabEP must be"),
    ({"p0": [0.5, 0.5, 0.5]}, GOOD_X, GOOD_Y, "p0 must be a scalar or have one value per group"),
    ({"p0": np.nan}, GOOD_X, GOOD_Y, "'p0' parameter of GroupSpikeSlabEP must be"),
    ({"v0": 0.0}, GOOD_X, GOOD_Y, "'v0' parameter of GroupSpikeSlabEP must be"),
    ({"v0": -1.0}, GOOD_X, GOOD_Y, "'v0' parameter of GroupSpikeSlabEP must be"),
    ({"noise_var": 0.0}, GOOD_X, GOOD_Y, "'noise_var' parameter of GroupSpikeSlabEP must be"),
    ({"noise_var": "1"}, GOOD_X, GOOD_Y, "'noise_var' parameter of GroupSpikeSlabEP must be"),
    ({"damping": 1.5}, GOOD_X, GOOD_Y, "'damping' parameter of GroupSpikeSlabEP must be"),
    ({"damping_decay": 0.0}, GOOD_X, GOOD_Y, "'damping_decay' parameter of GroupSpikeSlabEP must be"),
    ({"tol": 0.0}, GOOD_X, GOOD_Y, "'tol' parameter of GroupSpikeSlabEP must be"),
    ({"max_iter": 0}, GOOD_X, GOOD_Y, "'max_iter' parameter of GroupSpikeSlabEP must be"),
    ({"max_iter": 10.5}, GOOD_X, GOOD_Y, "'max_iter' parameter of GroupSpikeSlabEP must be"),
    ({"v_inf_ratio": -1.0}, GOOD_X, GOOD_Y, "'v_inf_ratio' parameter of GroupSpikeSlabEP must be"),
])
def test_bad_input_raises_naming_the_argument(kwargs, X, y, match):
    params = {"groups": GOOD_GROUPS, **kwargs}
    with pytest.raises(ValueError, match=match):
        GroupSpikeSlabEP(**params).fit(X, y)


def test_bad_operands_after_fit():
    est = GroupSpikeSlabEP(GOOD_GROUPS).fit(GOOD_X, GOOD_Y)
    with pytest.raises(ValueError, match=r"v must have shape \(4,\)"):
        est.cov_matvec(np.ones(3))
    with pytest.raises(ValueError, match="v contains NaN"):
        est.cov_matvec(np.full(4, np.nan))
    with pytest.raises(ValueError, match="X has 5 features, but GroupSpikeSlabEP is expecting 4 features"):
        est.predict(np.ones((2, 5)))


def test_ss_ep_p0_per_coefficient_is_checked():
    with pytest.raises(ValueError, match="one value per group \\(4\\)"):
        SpikeSlabEP(p0=[0.1, 0.2]).fit(GOOD_X, GOOD_Y)


@pytest.fixture(scope="module")
def oscillating_refits():
    """The rows and values of an E3 design loop whose warm refits include ones that circle their fixed point."""
    from adaptcs.data.synthetic import experiment_rng, make_e1_problem
    from adaptcs.design import run_sequential_design

    p = make_e1_problem(experiment_rng("E3", 0, 9), n=32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = run_sequential_design(GroupSpikeSlabEP(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0), p.w_true, p.X,
                                    p.y, 16,
                                    strategy="design", noise_var=1.0, row_norm=np.sqrt(512), rng=9)
    return p.groups, res.X, res.y


def _refits(groups, X, y, schedule):
    est = GroupSpikeSlabEP(groups, p0=4 / 128, v0=1 / 3, noise_var=1.0, warm_start=True, warm_schedule=schedule)
    out = []
    for n in range(32, X.shape[0] + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(X[:n], y[:n])
        out.append((n, est.n_iter_, est.converged_, est.coef_.copy(), est.group_prob_.copy(), copy.deepcopy(est)))
    return out


def test_adaptive_warm_schedule_is_faster_and_its_converged_flags_are_true(oscillating_refits):
    """Issue 14: the adaptive schedule ends circling refits early; every refit it calls converged is a fixed point
    (an undamped EP update from its sites moves the mean and group probabilities by < 10 tol), every other one says
    so, and the cold first fit is the paper's."""
    groups, X, y = oscillating_refits
    decay = _refits(groups, X, y, "decay")
    adaptive = _refits(groups, X, y, "adaptive")
    assert decay[0][1] == adaptive[0][1]  # the cold fit: same schedule, same iterations
    n_decay = sum(r[1] for r in decay[1:])
    n_adaptive = sum(r[1] for r in adaptive[1:])
    assert max(r[1] for r in decay[1:]) > 300  # the loop has refits that circle
    assert n_adaptive < 0.5 * n_decay
    checked = 0
    for n, _iters, converged, coef, prob, est in adaptive:
        step = clone(est).set_params(damping=1.0, max_iter=1, warm_schedule="decay")
        step.warm_state_ = replace(est.warm_state_, sites=est.sites_.copy())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            step.fit(X[:n], y[:n])
        size = np.sqrt(np.max(coef**2 + est.coef_var_))
        change = max(np.max(np.abs(step.coef_ - coef)) / size, np.max(np.abs(step.group_prob_ - prob)))
        if converged:
            assert change < 10 * est.tol, n
            checked += 1
    assert checked >= 8
    worst = max(range(1, len(adaptive)), key=lambda i: decay[i][1])
    assert adaptive[worst][2]  # the variance-decoupled fallback took it to a fixed point (checked above)
    with pytest.warns(ConvergenceWarning, match="not at a fixed point"):  # the parallel schedule alone does not
        est = adaptive[worst - 1][5].set_params(fallback=False)
        est.fit(X[: adaptive[worst][0]], y[: adaptive[worst][0]])
    # where both converged, they found the same fixed point
    for (_, _, ok_d, coef_d, prob_d, _), (_, _, ok_a, coef_a, prob_a, _) in zip(decay, adaptive, strict=True):
        if ok_d and ok_a:
            np.testing.assert_allclose(prob_a, prob_d, atol=5e-3)
            np.testing.assert_allclose(coef_a, coef_d, atol=5e-3 * np.abs(coef_d).max())


def test_verbose_logs_each_fit_and_long_runs(caplog):
    """verbose=1: one line per fit with the iterations, convergence and learned values; verbose=2: also every 25
    EP iterations; verbose=0 (the default): nothing."""
    import logging

    from adaptcs.data.synthetic import experiment_rng, make_e1_problem

    p = make_e1_problem(experiment_rng("E1", 0, 0))
    with caplog.at_level(logging.INFO, logger="adaptcs"):
        GroupSpikeSlabEP(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0).fit(p.X, p.y)
        assert not caplog.records
        est = GroupSpikeSlabEP(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0, verbose=1).fit(p.X, p.y)
        (record,) = caplog.records
        assert f"converged after {est.n_iter_} iterations" in record.getMessage()
        caplog.clear()
        GroupSpikeSlabEP(p.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0, verbose=2, damping_decay=1.0, tol=1e-7,
                         max_iter=60).fit(p.X, p.y)
        assert any("EP iteration 25, change" in r.getMessage() for r in caplog.records)
        caplog.clear()
        GroupSpikeSlabEP(p.groups, learn=("p0", "v0", "noise_var"), verbose=1).fit(p.X, p.y)
        assert "learned p0" in caplog.records[-1].getMessage()


def test_groups_as_pandas_strings_an_int_or_none(rng):
    """The same grouping given as pandas string labels, as an int (contiguous groups) or as integer labels gives
    the same fit; None is one group per coefficient, the same as SpikeSlabEP."""
    import pandas as pd

    X, y = rng.normal(size=(10, 8)), rng.normal(size=10)
    params = {"p0": 0.3, "v0": 1.0, "noise_var": 0.5}
    by_label = GroupSpikeSlabEP(np.arange(8) // 2, **params).fit(X, y)
    by_string = GroupSpikeSlabEP(pd.Series(list("aabbccdd")), **params).fit(X, y)
    by_size = GroupSpikeSlabEP(2, **params).fit(X, y)
    for other in (by_string, by_size):
        np.testing.assert_array_equal(other.coef_, by_label.coef_)
    assert list(by_string.group_labels_) == list("abcd")
    np.testing.assert_array_equal(GroupSpikeSlabEP(**params).fit(X, y).coef_, SpikeSlabEP(**params).fit(X, y).coef_)


def test_fits_find_the_blas_libraries_once(monkeypatch):
    """Limiting BLAS threads must not inspect the loaded libraries at every fit (3 ms each, a fifth of a designed
    E3 loop): the controller is built once per process."""
    import threadpoolctl

    from adaptcs.models import _base

    built = []
    original = threadpoolctl.ThreadpoolController.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    _base.blas_controller.cache_clear()
    monkeypatch.setattr(threadpoolctl.ThreadpoolController, "__init__", counting)
    rng = np.random.default_rng(0)
    X, groups = rng.normal(size=(10, 8)), np.arange(8) // 2
    for _ in range(3):
        GroupSpikeSlabEP(groups, p0=0.3, v0=1.0, noise_var=0.1).fit(X, X[:, 0])
    assert len(built) == 1


@pytest.mark.parametrize("blas_threads, expected", [(1, 1), (None, 2)])
def test_a_fit_runs_with_one_blas_thread_unless_told_otherwise(monkeypatch, blas_threads, expected):
    from threadpoolctl import threadpool_info, threadpool_limits

    from adaptcs.models import spike_slab_ep

    seen = []
    infer = spike_slab_ep.lrn.infer

    def spy(*args, **kwargs):
        seen.append(max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"))
        return infer(*args, **kwargs)

    monkeypatch.setattr(spike_slab_ep.lrn, "infer", spy)
    rng = np.random.default_rng(0)
    X, groups = rng.normal(size=(10, 8)), np.arange(8) // 2
    with threadpool_limits(2, user_api="blas"):
        GroupSpikeSlabEP(groups, p0=0.3, v0=1.0, noise_var=0.1, blas_threads=blas_threads).fit(X, X[:, 0])
        after = max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
    assert seen == [expected] and after == 2  # restored after the fit
