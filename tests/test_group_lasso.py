"""Group lasso: optimality conditions, the constraint, agreement with an independent proximal-gradient solve."""

import numpy as np
import pytest

from adaptcs.models import GroupLasso
from adaptcs.models.group_lasso import duality_gap, group_penalty

from conftest import random_group_problem

pytestmark = pytest.mark.slow  # the first fit compiles skglm with numba (about 10 s)


def members_of(groups):
    return [np.flatnonzero(groups == g) for g in np.unique(groups)]


def fista(X, y, alpha, members, n_iter=20000):
    """Independent solver: accelerated proximal gradient with block soft-thresholding."""
    step = 1.0 / np.linalg.norm(X, 2) ** 2
    w = z = np.zeros(X.shape[1])
    t = 1.0
    for _ in range(n_iter):
        u = z - step * (X.T @ (X @ z - y))
        w_new = np.zeros_like(u)
        for m in members:
            norm = np.linalg.norm(u[m])
            threshold = step * alpha * np.sqrt(len(m))
            if norm > threshold:
                w_new[m] = (1 - threshold / norm) * u[m]
        t_new = (1 + np.sqrt(1 + 4 * t * t)) / 2
        z = w_new + (t - 1) / t_new * (w_new - w)
        w, t = w_new, t_new
    return w


@pytest.mark.parametrize("seed", range(3))
def test_penalised_form_kkt_and_independent_solver(seed):
    rng = np.random.default_rng(seed)
    X, y, groups, _w = random_group_problem(rng, 20, 6, 3, 0.3)
    members = members_of(groups)
    alpha = 0.3 * max(np.linalg.norm((X.T @ y)[m]) / np.sqrt(len(m)) for m in members)
    est = GroupLasso(groups, alpha=alpha).fit(X, y)
    assert est.converged_ and est.duality_gap_ <= 1e-8 * duality_gap(X, y, est.coef_, alpha, members)[0]
    grad = X.T @ (y - X @ est.coef_)
    for m in members:
        norm = np.linalg.norm(est.coef_[m])
        if norm > 1e-10:  # active: X_g^T r = alpha sqrt(d_g) w_g / ||w_g||
            np.testing.assert_allclose(grad[m], alpha * np.sqrt(len(m)) * est.coef_[m] / norm, atol=1e-5)
        else:  # inactive: ||X_g^T r|| <= alpha sqrt(d_g)
            assert np.linalg.norm(grad[m]) <= alpha * np.sqrt(len(m)) * (1 + 1e-6)
    np.testing.assert_allclose(est.coef_, fista(X, y, alpha, members), atol=1e-6)


@pytest.mark.parametrize("k", [0.5, 2.0, 5.0])
def test_constrained_form_meets_the_constraint(rng, k):
    X, y, groups, _w = random_group_problem(rng, 20, 6, 3, 0.3)
    members = members_of(groups)
    est = GroupLasso(groups, k=k).fit(X, y)
    assert est.converged_
    assert abs(group_penalty(est.coef_, members) - k) <= 1e-6 * k
    # it is the penalised solution at alpha_, so an independent solve at that alpha agrees
    np.testing.assert_allclose(est.coef_, fista(X, y, est.alpha_, members), atol=1e-5)


def test_a_warm_path_of_growing_k_solves_the_same_problems_with_fewer_solves(rng):
    X, y, groups, _w = random_group_problem(rng, 20, 6, 3, 0.3)
    members = members_of(groups)
    path = GroupLasso(groups, warm_start=True)
    cold_solves = warm_solves = 0
    for k in (0.5, 1.0, 2.0, 4.0):  # growing k on the same data: each search starts from the last alpha
        warm = path.set_params(k=k).fit(X, y)
        cold = GroupLasso(groups, k=k).fit(X, y)
        assert warm.converged_ and abs(group_penalty(warm.coef_, members) - k) <= 1e-6 * k
        np.testing.assert_allclose(warm.coef_, fista(X, y, warm.alpha_, members), atol=1e-5)
        np.testing.assert_allclose(warm.alpha_, cold.alpha_, rtol=1e-5)
        cold_solves, warm_solves = cold_solves + cold.n_iter_, warm_solves + warm.n_iter_
    assert warm_solves < cold_solves
    # a smaller k, or other data, starts afresh from alpha_max: the same search as a cold fit
    assert path.set_params(k=1.0).fit(X, y).n_iter_ == GroupLasso(groups, k=1.0).fit(X, y).n_iter_
    y2 = y + rng.normal(0.0, 0.1, y.shape)
    assert path.set_params(k=2.0).fit(X, y2).n_iter_ == GroupLasso(groups, k=2.0).fit(X, y2).n_iter_


def test_loose_constraint_and_bad_input(rng):
    X, y, groups, _w = random_group_problem(rng, 30, 4, 2, 0.3)
    # neither alpha nor k: the penalty is cross-validated, exactly as with k="cv"
    np.testing.assert_array_equal(GroupLasso(groups).fit(X, y).coef_, GroupLasso(groups, k="cv").fit(X, y).coef_)
    with pytest.raises(ValueError, match="at most one of alpha"):
        GroupLasso(groups, alpha=1.0, k=1.0).fit(X, y)
    with pytest.raises(ValueError, match="'k' parameter of GroupLasso must be a float in the range"):
        GroupLasso(groups, k=-1.0).fit(X, y)
    est = GroupLasso(groups, k=1e6).fit(X, y)  # never binds: close to least squares
    np.testing.assert_allclose(est.coef_, np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-3)
    assert not hasattr(est, "cov_matvec")


def test_cross_validated_penalty_is_close_to_the_best_on_the_path(rng):
    """k="cv": the chosen penalty's estimate is nearly as close to the truth as the best penalty of the same
    path (judged against the true coefficients, which cross-validation never sees), far better than the ends."""
    from adaptcs.models.group_lasso import N_CV_ALPHAS

    X, y, groups, w = random_group_problem(rng, 80, 16, 4, 1.0, p0=0.2)
    est = GroupLasso(groups, k="cv").fit(X, y)
    assert est.converged_ and est.n_iter_ == 1
    alpha_max = np.max([np.linalg.norm(X[:, groups == g].T @ y) / 2.0 for g in range(16)])
    path = alpha_max * np.logspace(0.0, -3.0, N_CV_ALPHAS + 1)[1:]
    assert np.min(np.abs(np.log(path / est.alpha_))) < 1e-9  # a point of the path
    errors = [np.linalg.norm(GroupLasso(groups, alpha=a).fit(X, y).coef_ - w) for a in path]
    chosen = np.linalg.norm(est.coef_ - w)
    assert chosen <= 1.25 * min(errors)
    assert chosen < 0.5 * max(errors[0], errors[-1])
    with pytest.raises(ValueError, match=r"\'cv\' parameter of GroupLasso must be an int in the range \[2, inf\)"):
        GroupLasso(groups, k="cv", cv=1).fit(X, y)
    with pytest.raises(ValueError, match=r"'cv_every' parameter of GroupLasso must be an int in the range \[1, inf\)"):
        GroupLasso(groups, k="cv", cv_every=0).fit(X, y)
    with pytest.raises(ValueError, match="needs at least 5 rows"):
        GroupLasso(groups, k="cv").fit(X[:4], y[:4])


def test_refits_cross_validate_every_cv_every_rows(rng):
    """With warm_start, k="cv" cross-validates at the first fit and every cv_every-th refit (then the penalty is
    the one a fresh fit chooses); in between the last choice is kept as a fraction of alpha_max."""
    X, y, groups, _w = random_group_problem(rng, 60, 16, 4, 1.0, p0=0.2)

    def alpha_max(n):
        return np.max([np.linalg.norm(X[:n, groups == g].T @ y[:n]) / 2.0 for g in range(16)])

    est = GroupLasso(groups, k="cv", warm_start=True, cv_every=3)
    ratios = []
    for n in range(40, 47):
        est.fit(X[:n], y[:n])
        ratios.append(est.alpha_ / alpha_max(n))
        if (n - 40) % 3 == 0:  # cross-validated here: the same choice as a fit from scratch
            assert est.alpha_ == pytest.approx(GroupLasso(groups, k="cv").fit(X[:n], y[:n]).alpha_, rel=1e-12)
        else:
            assert ratios[-1] == pytest.approx(ratios[-2], rel=1e-12)


def test_a_learned_e1_job_records_the_penalty_it_chose():
    """The workflow's g_lasso job with learned values (run here, in-process: the tiny workflow run leaves g_lasso out
    because every process that fits it pays skglm's numba compile): each replicate records the cross-validated
    alpha it chose."""
    from adaptcs.experiments.runner import run_job

    job = run_job("E1", 0, "g_lasso", "random", [0, 1], hyperparameters="learned")
    assert job.hyperparameters == "learned" and job.fitted_alpha.shape == (2,)
    assert np.all(job.fitted_alpha > 0) and np.all(np.isfinite(job.errors)) and not job.failed.any()
    assert job.fitted_alpha[0] != job.fitted_alpha[1]  # chosen per replicate, not shared
