"""Group ARD: the paper's one-group toy, monotone evidence, agreement with a generic optimiser, posterior."""

import numpy as np
import pytest
from scipy.optimize import minimize

from adaptcs.models import GroupARD
from adaptcs.models.group_ard import optimal_group_variance

from conftest import random_group_problem


def log_evidence(X, y, s2, coef_group, lam):
    C = s2 * np.eye(len(y)) + (X * lam[coef_group]) @ X.T
    return -0.5 * (len(y) * np.log(2 * np.pi) + np.linalg.slogdet(C)[1] + y @ np.linalg.solve(C, y))


@pytest.mark.parametrize("scale", [0.5, 0.9, 1.1, 2.0, 5.0])
def test_one_group_toy_of_the_paper(rng, scale):
    """X = I, n = d_g, s2 = 1: lam = 0 if ||y||^2 <= d_g, else ||y||^2 / d_g - 1."""
    d = 6
    y = rng.normal(size=d)
    y *= np.sqrt(scale * d) / np.linalg.norm(y)  # ||y||^2 = scale * d
    est = GroupARD(np.zeros(d, int), noise_var=1.0, tol=1e-12).fit(np.eye(d), y)
    expected = max(0.0, y @ y / d - 1.0)
    assert est.group_var_[0] == pytest.approx(expected, rel=1e-8, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_evidence_never_decreases_and_matches_a_generic_optimiser(seed):
    rng = np.random.default_rng(seed)
    X, y, groups, _w = random_group_problem(rng, 15, 6, 3, 0.5)
    est = GroupARD(groups, noise_var=0.5, tol=1e-12, refactor_every=3).fit(X, y)
    trace = est.evidence_trace_
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    assert est.log_evidence_ == pytest.approx(log_evidence(X, y, 0.5, groups, est.group_var_), abs=1e-8)

    # L-BFGS-B over lam >= 0 from several starts never finds a higher evidence ...
    def negative(lam):
        return -log_evidence(X, y, 0.5, groups, lam)

    for start in [np.full(6, 0.5), rng.uniform(0, 2, 6), est.group_var_ + 0.1]:
        res = minimize(negative, start, bounds=[(0, None)] * 6, method="L-BFGS-B",
                       options={"ftol": 1e-14, "gtol": 1e-10, "maxiter": 5000})
        assert est.log_evidence_ >= -res.fun - 1e-6
    # ... and ARD's answer satisfies the optimality conditions: zero gradient where lam > 0, not positive at 0.
    h = 1e-6
    for g in range(6):
        step = np.zeros(6)
        step[g] = h
        up = -negative(est.group_var_ + step)
        if est.group_var_[g] > 1e-4:
            down = -negative(est.group_var_ - step)
            assert abs(up - down) / (2 * h) < 1e-4
        else:
            assert (up - est.log_evidence_) / h < 1e-4


def test_optimal_group_variance_against_brute_force(rng):
    for _ in range(50):
        s = rng.uniform(0.01, 3, 4)
        q = rng.normal(0, 2, 4)
        lam = optimal_group_variance(s, q)
        grid = np.linspace(0, 50, 200001)
        values = 0.5 * np.sum(q[:, None] ** 2 * grid / (1 + grid * s[:, None]) - np.log1p(grid * s[:, None]), axis=0)
        best = grid[np.argmax(values)]
        objective = 0.5 * np.sum(q**2 * lam / (1 + lam * s) - np.log1p(lam * s))
        assert objective >= values.max() - 1e-9 or abs(lam - best) < 1e-3


def test_posterior_is_the_gaussian_one_given_the_variances(rng):
    X, y, groups, _w = random_group_problem(rng, 20, 5, 3, 0.5)
    est = GroupARD(groups, noise_var=0.5).fit(X, y)
    a = est.group_var_[groups]
    C = 0.5 * np.eye(20) + (X * a) @ X.T
    V = np.diag(a) - (a[:, None] * X.T) @ np.linalg.solve(C, X * a)
    np.testing.assert_allclose(est.coef_, a * (X.T @ np.linalg.solve(C, y)), atol=1e-10)
    np.testing.assert_allclose(est.coef_var_, np.maximum(np.diag(V), 0), atol=1e-10)
    v = rng.normal(size=15)
    np.testing.assert_allclose(est.cov_matvec(v), V @ v, atol=1e-10)
    mean, std = est.predict(X[:3], return_std=True)
    np.testing.assert_allclose(std, np.sqrt(np.einsum("ij,jk,ik->i", X[:3], V, X[:3]) + 0.5), rtol=1e-8)
    assert np.all(est.coef_[a == 0] == 0)


def test_warm_start_and_bad_input(rng):
    X, y, groups, _w = random_group_problem(rng, 20, 5, 3, 0.5)
    cold = GroupARD(groups, noise_var=0.5).fit(X, y)
    warm = GroupARD(groups, noise_var=0.5, warm_start=True).fit(X, y)
    warm.fit(X, y)
    assert warm.n_iter_ <= 2
    np.testing.assert_allclose(warm.group_var_, cold.group_var_, rtol=1e-4, atol=1e-8)
    with pytest.raises(ValueError, match="noise_var"):
        GroupARD(groups, noise_var=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="groups has"):
        GroupARD(groups[:5]).fit(X, y)


def test_learned_noise_variance(rng):
    """learn=("noise_var",): the noise variance the data were simulated with is found (n >> d), the evidence
    never decreases, and at the answer the dense evidence is stationary in s2 (an independent computation)."""
    found = []
    for _ in range(3):
        X, y, groups, _w = random_group_problem(rng, 300, 10, 4, 0.25)
        est = GroupARD(groups, noise_var=3.0, learn=("noise_var",)).fit(X, y)
        assert est.converged_ and np.all(np.diff(est.evidence_trace_) >= -1e-9)
        found.append(est.noise_var_)
        h = 1e-6
        up = log_evidence(X, y, est.noise_var_ * (1 + h), groups, est.group_var_)
        down = log_evidence(X, y, est.noise_var_ * (1 - h), groups, est.group_var_)
        assert abs(up - down) / (2 * h) < 1e-4 * X.shape[0]
        assert est.log_evidence_ == pytest.approx(log_evidence(X, y, est.noise_var_, groups, est.group_var_),
                                                  abs=1e-8)
    assert np.median(found) == pytest.approx(0.25, rel=0.15)
    fixed = GroupARD(groups, noise_var=3.0).fit(X, y)
    assert fixed.noise_var_ == 3.0 and est.log_evidence_ > fixed.log_evidence_
    with pytest.raises(ValueError, match="learn must be distinct names from \\('noise_var',\\)"):
        GroupARD(groups, learn=("p0",)).fit(X, y)


def test_all_zero_measurements_ask_for_what_this_estimator_takes():
    """Nothing to scale learning by: GroupARD asks for its noise variance (it has no v0), GSS-EP for v0 and noise_var;
    with noise_var given GroupARD fits."""
    from adaptcs.models import GroupSpikeSlabEP

    X, groups = np.random.default_rng(0).normal(size=(5, 8)), np.arange(8) // 2
    with pytest.raises(ValueError, match=r"^GroupARD: the measurements are all zero.*give noise_var$"):
        GroupARD(groups).fit(X, np.zeros(5))
    with pytest.raises(ValueError, match=r"all zero.*give v0 and noise_var$"):
        GroupSpikeSlabEP(groups).fit(X, np.zeros(5))
    assert np.all(GroupARD(groups, noise_var=1.0).fit(X, np.zeros(5)).coef_ == 0.0)
