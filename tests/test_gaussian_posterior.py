"""The two exact forms of the Gaussian posterior against dense linear algebra."""

import numpy as np
import pytest

from adaptcs.models._gaussian import LinearGaussianModel


def dense_posterior(X, y, s2, prior_var, shift):
    V = np.linalg.inv(X.T @ X / s2 + np.diag(1.0 / prior_var))
    return V, V @ (X.T @ y / s2 + shift)


@pytest.mark.parametrize("n, d", [(5, 17), (17, 5), (12, 12), (40, 90)])
@pytest.mark.parametrize("form", ["woodbury", "direct"])
def test_posterior_matches_dense(rng, n, d, form):
    X = rng.normal(size=(n, d))
    y = rng.normal(size=n)
    s2 = 0.7
    prior_var = rng.uniform(0.01, 3.0, d)
    shift = rng.normal(size=d)
    V, m = dense_posterior(X, y, s2, prior_var, shift)
    post = LinearGaussianModel(X, y, s2, form=form).posterior(prior_var, shift)

    np.testing.assert_allclose(post.mean, m, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(post.var, np.diag(V), rtol=1e-8, atol=1e-12)
    assert post.log_det() == pytest.approx(np.linalg.slogdet(V)[1], rel=1e-9, abs=1e-9)

    v = rng.normal(size=d)
    block = rng.normal(size=(d, 3))
    np.testing.assert_allclose(post.matvec(v), V @ v, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(post.matvec(block), V @ block, rtol=1e-8, atol=1e-10)

    Z = rng.normal(size=(4, d))
    np.testing.assert_allclose(post.quad_rows(Z), np.einsum("ij,jk,ik->i", Z, V, Z), rtol=1e-8)
    assert post.trace_data() == pytest.approx(np.trace(X @ V @ X.T), rel=1e-8)


def test_auto_form_follows_shape(rng):
    assert LinearGaussianModel(rng.normal(size=(3, 8)), np.zeros(3), 1.0).use_woodbury
    assert not LinearGaussianModel(rng.normal(size=(8, 8)), np.zeros(8), 1.0).use_woodbury
    with pytest.raises(ValueError, match="form"):
        LinearGaussianModel(rng.normal(size=(3, 8)), np.zeros(3), 1.0, form="dense")


@pytest.mark.parametrize("n, d", [(1, 6), (5, 17), (12, 12)])
def test_selection_form_matches_dense(rng, n, d):
    """Rows that each measure one coefficient (gains of either sign, rounding-level leakage elsewhere): the
    diagonal form against the dense inverse."""
    columns = rng.choice(d, n, replace=False)
    X = np.zeros((n, d))
    X[np.arange(n), columns] = rng.uniform(0.5, 4.0, n) * rng.choice([-1.0, 1.0], n)
    X += 1e-15 * rng.normal(size=(n, d)) * (X == 0)  # a transform's rounding
    y = rng.normal(size=n)
    s2, prior_var, shift = 0.3, rng.uniform(0.01, 3.0, d), rng.normal(size=d)
    model = LinearGaussianModel(X, y, s2, form="selection")
    post = model.posterior(prior_var, shift)
    V, m = dense_posterior(X, y, s2, prior_var, shift)
    np.testing.assert_allclose(post.mean, m, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(post.var, np.diag(V), rtol=1e-10)
    np.testing.assert_allclose(post.var_reduction, prior_var - np.diag(V), rtol=1e-9, atol=1e-14)
    assert post.log_det() == pytest.approx(np.linalg.slogdet(V)[1], rel=1e-10)
    K = s2 * np.eye(n) + X @ np.diag(prior_var) @ X.T
    assert post.log_det_marginal() == pytest.approx(np.linalg.slogdet(K)[1], rel=1e-10, abs=1e-10)
    block = rng.normal(size=(d, 3))
    np.testing.assert_allclose(post.matvec(block), V @ block, rtol=1e-10, atol=1e-12)
    Z = rng.normal(size=(4, d))
    np.testing.assert_allclose(post.quad_rows(Z), np.einsum("ij,jk,ik->i", Z, V, Z), rtol=1e-10)
    assert post.trace_data() == pytest.approx(np.trace(X @ V @ X.T), rel=1e-10)


def test_selection_form_needs_a_selection(rng):
    X = np.eye(6)[[0, 2, 2]]  # coefficient 2 twice
    with pytest.raises(ValueError, match="one coefficient"):
        LinearGaussianModel(X, np.zeros(3), 1.0, form="selection")
    X = np.eye(6)[[0, 2]] + np.eye(6)[[1, 3]] * 1e-3  # a second coefficient above rounding
    with pytest.raises(ValueError, match="one coefficient"):
        LinearGaussianModel(X, np.zeros(2), 1.0, form="selection")


@pytest.mark.parametrize("n", [20, 80])
def test_posterior_mean_alone_is_the_dense_posterior_mean(n):
    """The mean-only path (Woodbury form for n < d, the posterior otherwise) against the d x d inverse."""
    rng = np.random.default_rng(n)
    X, y = rng.normal(size=(n, 60)), rng.normal(size=n)
    model = LinearGaussianModel(X, y, 0.3)
    prior_var, shift = rng.uniform(0.1, 2.0, 60), rng.normal(size=60)
    dense = np.linalg.solve(X.T @ X / 0.3 + np.diag(1 / prior_var), X.T @ y / 0.3 + shift)
    np.testing.assert_allclose(model.posterior_mean(prior_var, shift), dense, rtol=0, atol=1e-10 * np.abs(dense).max())
