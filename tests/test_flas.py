"""FLAS against dense linear algebra, closed forms on an orthogonal design, Monte Carlo and enumeration."""

import warnings

import numpy as np
import pytest
from scipy.linalg import block_diag
from scipy.special import expit

from adaptcs.design import run_sequential_design
from adaptcs.experiments import synthetic_case
from adaptcs.models import FLAS, UngroupedFLAS, exact_group_spike_slab
from adaptcs.models.flas import _Groups, _Objective, _Prior


@pytest.fixture(scope="module")
def e1():
    return synthetic_case("E1", 0, 0).problem


@pytest.mark.parametrize("make", [lambda g: FLAS(g, p0=4 / 128, v0=1 / 3, noise_var=1.0),
                         lambda g: UngroupedFLAS(p0=16 / 512, v0=1 / 3, noise_var=1.0),
                                  lambda g: FLAS(g, p0=4 / 128, v0=1 / 3, noise_var=1.0, method="gist")])
def test_laplace_covariance_equals_the_dense_inverse_hessian(e1, make):
    est = make(e1.groups).fit(e1.X, e1.y)
    w = est.coef_
    groups = np.arange(512) if isinstance(est, UngroupedFLAS) else e1.groups
    G = int(groups.max()) + 1
    prior = _Prior(_Groups(groups, G), np.full(G, est.p0_), est.v0_, 1e-3 * est.v0_)
    a, c = est._prior_hessian(w, prior)
    members = [np.flatnonzero(groups == g) for g in range(G)]
    order = np.concatenate(members)
    B = block_diag(*[a[g] * np.eye(idx.size) - c[g] * np.outer(w[idx], w[idx]) for g, idx in enumerate(members)])
    H = e1.X[:, order].T @ e1.X[:, order] / est.noise_var_ + B
    cov = np.empty((512, 512))
    cov[np.ix_(order, order)] = np.linalg.inv(H)
    np.testing.assert_allclose(est.coef_var_, np.diag(cov), rtol=1e-8, atol=1e-14)
    V = np.random.default_rng(0).normal(size=(512, 3))
    np.testing.assert_allclose(est.cov_matvec(V), cov @ V, rtol=1e-8, atol=1e-12)
    _, std = est.predict(e1.X[:4], return_std=True)
    np.testing.assert_allclose(std ** 2, np.einsum("ij,jk,ik->i", e1.X[:4], cov, e1.X[:4]) + 1.0, rtol=1e-8)
    assert np.all(np.linalg.eigvalsh(B) > 0)  # the floor keeps B positive definite


def test_gradient_of_the_marginal_objective(e1):
    groups = _Groups(e1.groups, 128)
    objective = _Objective(e1.X, e1.y, 1.0, _Prior(groups, np.full(128, 4 / 128), 1 / 3, 1e-3 / 3))
    w = np.random.default_rng(1).normal(0, 0.1, 512)
    _, grad = objective.smooth(w)
    h = 1e-6
    for j in (0, 7, 300):
        e = np.zeros(512)
        e[j] = h
        numeric = (objective.smooth(w + e)[0] - objective.smooth(w - e)[0]) / (2 * h)
        assert grad[j] == pytest.approx(numeric, rel=1e-6, abs=1e-8)


def orthogonal_problem(rng, n=40, n_groups=6, size=3):
    X, _ = np.linalg.qr(rng.normal(size=(n, n_groups * size)))
    groups = np.repeat(np.arange(n_groups), size)
    w = np.where(groups < 2, rng.normal(0, 2.0, n_groups * size), 0.0)
    return X, X @ w + rng.normal(0, 0.1, n), groups


def test_gist_fixed_point_on_an_orthogonal_design_is_the_closed_form(rng):
    """X^T X = I: F* separates by group; each group is b_g / (1 + s2 / r_k) for the component k with the lower
    ||b_g||^2 / (2 (s2 + r_k)) - const_k (b_g = X_g^T y), and the MAP picks it exactly."""
    X, y, groups = orthogonal_problem(rng)
    p0, v0, s2 = 0.3, 4.0, 0.01
    r0 = 1e-3 * v0
    est = FLAS(groups, p0=p0, v0=v0, noise_var=s2, method="gist").fit(X, y)
    b = X.T @ y
    norm2 = np.bincount(groups, weights=b * b)
    const = [np.log1p(-p0) - 1.5 * np.log(2 * np.pi * r0), np.log(p0) - 1.5 * np.log(2 * np.pi * v0)]
    cost = [norm2 / (2 * (s2 + r)) - k for r, k in zip([r0, v0], const, strict=True)]
    slab = cost[1] < cost[0]
    expected = b / (1 + s2 / np.where(slab, v0, r0)[groups])
    np.testing.assert_allclose(est.coef_, expected, rtol=1e-6, atol=1e-9)
    assert est.converged_


def test_lbfgs_fixed_point_on_an_orthogonal_design(rng):
    """X^T X = I: w_g = b_g / (1 + s2 a_g(||w_g||^2)) at a stationary point; the 1-D equation along b_g is solved
    independently on a fine grid (global minimum of the group's objective along the ray)."""
    X, y, groups = orthogonal_problem(rng)
    p0, v0, s2 = 0.3, 4.0, 0.01
    est = FLAS(groups, p0=p0, v0=v0, noise_var=s2).fit(X, y)
    b = X.T @ y
    for g in range(6):
        bg = b[groups == g]
        t = np.linspace(0, 1, 200001)[:, None]  # w_g = t b_g (the minimiser lies on that ray)
        norm2 = (t[:, 0] ** 2) * float(bg @ bg)
        l1 = np.log(p0) - 1.5 * np.log(2 * np.pi * v0) - norm2 / (2 * v0)
        l0 = np.log1p(-p0) - 1.5 * np.log(2 * np.pi * 1e-3 * v0) - norm2 / (2e-3 * v0)
        values = ((1 - t[:, 0]) ** 2) * float(bg @ bg) / (2 * s2) - np.logaddexp(l1, l0)
        best = t[np.argmin(values), 0] * bg
        np.testing.assert_allclose(est.coef_[groups == g], best, atol=2e-5 * max(1.0, np.abs(bg).max()))


def test_group_probabilities_are_the_laplace_expectation(e1):
    """The quadrature against plain Monte Carlo from each group's Laplace marginal N(w_g, Sigma_g)."""
    est = FLAS(e1.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0).fit(e1.X, e1.y)
    rng = np.random.default_rng(2)
    picked = np.argsort(np.abs(est.group_prob_ - 0.5))[:5]  # the least certain groups
    for g in picked:
        idx = np.flatnonzero(e1.groups == g)
        e = np.zeros((512, idx.size))
        e[idx, np.arange(idx.size)] = 1.0
        sigma = est.cov_matvec(e)[idx]
        samples = rng.multivariate_normal(est.coef_[idx], sigma, size=200_000)
        norm2 = np.sum(samples ** 2, axis=1)  # slab N(0, 1/3 I_4) against spike N(0, 1e-3/3 I_4)
        rho = expit(np.log(4 / 128) - 2 * np.log(2 * np.pi / 3) - 1.5 * norm2
                    - (np.log(124 / 128) - 2 * np.log(2 * np.pi * 1e-3 / 3) - 1.5e3 * norm2))
        assert est.group_prob_[g] == pytest.approx(rho.mean(), abs=4 * rho.std() / np.sqrt(rho.size) + 2e-3)


def test_group_probabilities_near_exact_enumeration_with_a_narrow_spike(rng):
    """With r0 -> 0 the continuous spike becomes the point mass of the exact model; where the data decide, the
    Laplace probabilities and the enumerated ones agree within 0.02 (the Laplace marginal is Gaussian, the
    exact one a mixture, so uncertain groups are not compared)."""
    X = rng.normal(size=(30, 16))
    groups = np.repeat(np.arange(8), 2)
    w = np.where(groups < 2, rng.choice([-1.5, 1.5], 16), 0.0)
    y = X @ w + rng.normal(0, 0.1, 30)
    exact = exact_group_spike_slab(X, y, groups, 0.25, 2.0, 0.01).group_prob
    est = FLAS(groups, p0=0.25, v0=2.0, noise_var=0.01, r0=1e-7).fit(X, y)
    decided = (exact < 0.02) | (exact > 0.98)
    assert decided.sum() >= 6
    np.testing.assert_allclose(est.group_prob_[decided], exact[decided], atol=0.02)


def test_flas_runs_the_design_loop(e1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_sequential_design(FLAS(e1.groups, p0=4 / 128, v0=1 / 3, noise_var=1.0), e1.w_true, e1.X[:32],
                                    e1.y[:32], 4,
                                    strategy="design", noise_var=1.0, row_norm=np.sqrt(512), rng=0)
    assert res.errors.shape == (5,) and np.all(np.isfinite(res.errors)) and res.converged.min() >= 0


@pytest.mark.parametrize("kwargs, match", [
    ({"r0": 1.0, "v0": 0.5}, "must be smaller than v0"),
    ({"method": "newton"}, "method"),
    ({"init": "ridge"}, "init"),
    ({"n_gh": 0}, "n_gh"),
])
def test_bad_parameters(e1, kwargs, match):
    with pytest.raises(ValueError, match=match):
        FLAS(e1.groups, **kwargs).fit(e1.X, e1.y)


def test_docstring_examples_run():
    import doctest

    import adaptcs.models.flas as module

    result = doctest.testmod(module)
    assert result.attempted >= 6 and result.failed == 0


def test_learned_variants_design_with_flas_but_not_with_vg(e1):
    """Without an oracle both are fitted with the prior GSS-EP learns; FLAS keeps its Laplace covariance for design,
    VG has none (random rows only) and the ungrouped forms get the learned p0 as a coefficient's probability."""
    from adaptcs.design import has_posterior_covariance
    from adaptcs.models.registry import PriorInfo, make_estimator

    start = PriorInfo(p0_group=0.5, p0_coef=0.5, v0=1.0, noise_var=1.0)
    flas = make_estimator("flas", e1.groups, start, hyperparameters="learned")
    assert has_posterior_covariance(flas)
    assert not has_posterior_covariance(make_estimator("vg", e1.groups, start, hyperparameters="learned"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_sequential_design(flas, e1.w_true, e1.X[:32], e1.y[:32], 2, strategy="design", noise_var=1.0,
                                    row_norm=np.sqrt(512), rng=0)
        ungrouped = make_estimator("flas_ungrouped", e1.groups, start, hyperparameters="learned").fit(e1.X, e1.y)
    assert np.all(np.isfinite(res.errors))
    assert ungrouped.estimator_.p0 == pytest.approx(ungrouped.p0_) and ungrouped.p0_ < 0.2


def test_learned_prior_tracks_its_values_in_warm_refits(e1):
    """In a design loop the learned prior is tracked (GSS-EP's warm-started learning), not learned from scratch
    at every row: the same GSS-EP object refits, and its values stay near those learned from scratch."""
    from adaptcs.models.registry import PriorInfo, make_estimator

    start = PriorInfo(p0_group=0.5, p0_coef=0.5, v0=1.0, noise_var=1.0)
    warm = make_estimator("flas", e1.groups, start, hyperparameters="learned").set_params(warm_start=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warm.fit(e1.X[:60], e1.y[:60])
        first = warm.prior_fit_
        warm.fit(e1.X, e1.y)
        cold = make_estimator("flas", e1.groups, start, hyperparameters="learned").fit(e1.X, e1.y)
    assert warm.prior_fit_ is first and first.warm_start
    for name in ("p0_", "v0_", "noise_var_"):
        assert getattr(warm, name) == pytest.approx(getattr(cold, name), rel=0.15), name
