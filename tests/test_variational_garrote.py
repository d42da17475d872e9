"""The variational garrote against closed forms and dense linear algebra."""

import warnings

import numpy as np
import pytest
from scipy.linalg import block_diag
from scipy.special import expit, logit

from adaptcs.experiments import synthetic_case
from adaptcs.models import UngroupedVariationalGarrote, VariationalGarrote, exact_group_spike_slab
from adaptcs.models.variational_garrote import _VGProblem


@pytest.fixture(scope="module")
def e1():
    return synthetic_case("E1", 0, 0).problem


def test_dual_and_primal_solves_agree_with_the_direct_variational_ridge(e1):
    X, y, groups = e1.X, e1.y, e1.groups
    G = 128
    m = np.random.default_rng(0).uniform(0.01, 0.99, G)
    gamma = np.full(G, -3.0)
    dual = _VGProblem(X, y, groups, G, 1.0, "dual", 1e-6, 100)
    primal = _VGProblem(X, y, groups, G, 1.0, "primal", 1e-6, 100)
    a, b = dual.evaluate(m, gamma), primal.evaluate(m, gamma)
    v_dual, v_primal = dual.basis.coefficients(a.xi), primal.basis.coefficients(b.xi)
    # the variational ridge in the original coordinates: (X^T X + blockdiag(c_g X_g^T X_g)) v = X^T y
    c = (1 - m) / m
    members = [np.flatnonzero(groups == g) for g in range(G)]
    order = np.concatenate(members)
    blocks = block_diag(*[c[g] * X[:, idx].T @ X[:, idx] for g, idx in enumerate(members)])
    v_direct = np.empty(512)
    v_direct[order] = np.linalg.solve(X[:, order].T @ X[:, order] + blocks, X[:, order].T @ y)
    np.testing.assert_allclose(v_dual, v_direct, atol=1e-7 * np.abs(v_direct).max())
    np.testing.assert_allclose(v_primal, v_direct, atol=1e-6 * np.abs(v_direct).max())
    assert a.free_energy == pytest.approx(b.free_energy, rel=1e-9)
    np.testing.assert_allclose(a.proj2, b.proj2, rtol=1e-6, atol=1e-12)
    fit_dual = VariationalGarrote(groups, p0=4 / 128, v0=1 / 3, noise_var=1.0, form="dual").fit(X, y)
    fit_primal = VariationalGarrote(groups, p0=4 / 128, v0=1 / 3, noise_var=1.0, form="primal").fit(X, y)
    np.testing.assert_allclose(fit_dual.coef_, fit_primal.coef_, atol=1e-5)


def orthogonal_problem(rng, n=40, n_groups=6, size=3, noise=0.1):
    X, _ = np.linalg.qr(rng.normal(size=(n, n_groups * size)))  # orthonormal columns
    groups = np.repeat(np.arange(n_groups), size)
    w = np.where(groups < 2, rng.normal(0, 2.0, n_groups * size), 0.0)
    return X, X @ w + rng.normal(0, noise, n), groups


@pytest.mark.parametrize("ungrouped", [False, True])
def test_fixed_point_on_an_orthogonal_design_is_the_closed_form(rng, ungrouped):
    """With X^T X = I: xi_g = m_g X_g^T y and m_g = sig(gamma_g + (beta/2) ||X_g^T y||^2), explicitly."""
    X, y, groups = orthogonal_problem(rng)
    p0, v0, s2 = 0.3, 4.0, 0.01
    if ungrouped:
        est = UngroupedVariationalGarrote(p0=p0, v0=v0, noise_var=s2).fit(X, y)
        groups = np.arange(X.shape[1])
    else:
        est = VariationalGarrote(groups, p0=p0, v0=v0, noise_var=s2).fit(X, y)
    sizes = np.bincount(groups)
    proj2 = np.bincount(groups, weights=(X.T @ y) ** 2)
    offsets = -0.5 * sizes * np.log1p(v0 / s2)  # log det(I + (v0/s2) I_dg)
    m = expit(logit(p0) + offsets + proj2 / (2 * s2))
    np.testing.assert_allclose(est.group_prob_, np.clip(m, 1e-10, 1 - 1e-8), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(est.coef_, m[groups] * (X.T @ y), atol=1e-6)
    assert est.converged_ and est.gamma_ == pytest.approx(logit(p0))
    given = VariationalGarrote(groups, gamma_selection=-2.0, noise_var=s2).fit(X, y)  # no offsets
    np.testing.assert_allclose(given.group_prob_, np.clip(expit(-2.0 + proj2 / (2 * s2)), 1e-10, 1 - 1e-8),
                               rtol=1e-5, atol=1e-9)


def test_selection_matches_exact_enumeration_where_both_are_certain(rng):
    """VG's q(s) and the exact spike-and-slab posterior of the groups agree where the data decide: with a strong
    signal both put every group at < 0.01 or > 0.99 (they are different models, a flat prior on w against a
    N(0, v0) slab, so in-between probabilities are not compared)."""
    X, y, groups = orthogonal_problem(rng, n=24, n_groups=8, size=2, noise=0.1)
    X = X * 3.0  # not orthonormal any more: the general dual solve
    y = X @ np.linalg.lstsq(X, y, rcond=None)[0] + rng.normal(0, 0.1, 24)
    exact = exact_group_spike_slab(X, y, groups, 0.25, 4.0, 0.01).group_prob
    vg = VariationalGarrote(groups, p0=0.25, v0=4.0, noise_var=0.01).fit(X, y).group_prob_
    assert np.all((exact < 0.01) | (exact > 0.99))
    np.testing.assert_array_equal(vg > 0.5, exact > 0.5)
    assert np.all(np.abs(vg - exact) < 0.01)


def test_free_energy_falls_along_the_inner_iteration(e1):
    problem = _VGProblem(e1.X, e1.y, e1.groups, 128, 1.0, "dual", 1e-8, 1)
    gamma = np.full(128, -4.0)
    m = np.full(128, 0.2)
    energies = []
    for _ in range(30):
        sol = problem.solve(m, gamma)  # one damped step per call
        energies.append(sol.free_energy)
        m = sol.m
    assert np.all(np.diff(energies) <= 1e-9 * np.abs(energies[:-1]))


def test_cross_validated_gamma_and_estimated_noise(e1):
    est = VariationalGarrote(e1.groups, gamma_selection="cv", cv=3, n_gamma=12, random_state=0,
                             noise_var=None).fit(e1.X, e1.y)
    assert est.cv_mse_.shape == (12,) and est.gamma_ == est.gammas_[np.argmin(est.cv_mse_)]
    assert np.isfinite(est.noise_var_) and est.noise_var_ > 0
    assert est.predict(e1.X).shape == (64,)


@pytest.mark.parametrize("kwargs, match", [
    ({"gamma_selection": "best"}, "gamma_selection"),
    ({"p0": 1.0}, "p0"),
    ({"noise_var": 0.0}, "noise_var"),
    ({"form": "sparse"}, "form"),
    ({"n_gamma": 1}, "n_gamma"),
])
def test_bad_parameters(e1, kwargs, match):
    with pytest.raises(ValueError, match=match):
        VariationalGarrote(e1.groups, **kwargs).fit(e1.X, e1.y)


def test_groups_larger_than_the_rows_are_refused(rng):
    X = rng.normal(size=(3, 8))
    with pytest.raises(ValueError, match="only 3 rows"):
        VariationalGarrote(np.repeat([0, 1], 4)).fit(X, np.ones(3))


def test_docstring_examples_run():
    import doctest

    import adaptcs.models.variational_garrote as module

    result = doctest.testmod(module)
    assert result.attempted >= 8 and result.failed == 0


def test_ill_conditioned_rows_are_reported_not_hidden_behind_converged():
    """Issue 46, point 10: on ill-conditioned X the path converges to an estimate worse than zero (a wrong group
    with large coefficients, which the flat prior does not penalise); fit says so and records the condition."""
    groups, d, n = np.repeat(np.arange(10), 4), 40, 20
    rng = np.random.default_rng(1)
    U, _ = np.linalg.qr(rng.normal(size=(n, n)))
    V, _ = np.linalg.qr(rng.normal(size=(d, d)))
    X = (U * np.logspace(0, -4, n)) @ V[:, :n].T * np.sqrt(d)  # singular values 1 .. 1e-4 (times sqrt(d))
    w = np.where(groups < 2, rng.normal(size=d), 0.0)
    y = X @ w + 0.1 * rng.normal(size=n)
    with pytest.warns(UserWarning, match=r"condition number 1e\+04.*far from the truth even when converged") as got:
        vg = VariationalGarrote(groups, p0=0.2, v0=1.0, noise_var=0.01).fit(X, y)
    assert got[0].filename == __file__
    assert vg.converged_ and np.linalg.norm(vg.coef_ - w) > np.linalg.norm(w)  # what the warning is about
    np.testing.assert_allclose(vg.condition_number_, 1e4, rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        well = VariationalGarrote(groups, p0=0.2, v0=1.0, noise_var=0.01).fit(rng.normal(size=(n, d)), y)
    assert well.condition_number_ < 10
