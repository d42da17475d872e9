"""Eigenvalues and weights of one vector on the eigenvectors, against numpy's dense eigendecomposition."""

import numpy as np
import pytest

from adaptcs.models._spectral import spectral_weights


def dense_reference(A, y):
    w, U = np.linalg.eigh(A)
    return w, np.einsum("kab,ka->kb", U, y) ** 2


def random_case(rng, k, n, rank):
    X = rng.standard_normal((k, n, rank)) * np.logspace(0, -4, rank)
    return X @ X.transpose(0, 2, 1), X


@pytest.mark.parametrize("n, rank", [(2, 2), (7, 7), (40, 40), (40, 13)])
def test_matches_dense_eigendecomposition(n, rank):
    rng = np.random.default_rng(n + rank)
    A, X = random_case(rng, 3, n, rank)
    y = np.einsum("kab,kb->ka", X, rng.standard_normal((3, rank))) + 1e-3 * rng.standard_normal((3, n))
    w, rho = spectral_weights(A, y)
    w_ref, rho_ref = dense_reference(A, y)
    np.testing.assert_allclose(w, w_ref, atol=1e-12 * w_ref.max())
    # eigenvalues that (nearly) coincide share their weight arbitrarily: compare sums over clusters via a smooth
    # function of w, as the evidence uses them, and single weights where the spectrum is simple
    for t in (0.1, 1.0, 10.0):
        np.testing.assert_allclose(np.sum(rho / (1 + t * w), axis=1), np.sum(rho_ref / (1 + t * w_ref), axis=1),
                                   rtol=1e-10)
    np.testing.assert_allclose(rho.sum(axis=1), np.sum(y * y, axis=1), rtol=1e-12)
    if rank == n:
        np.testing.assert_allclose(rho, rho_ref, atol=1e-10 * rho_ref.max())


def test_vector_along_an_eigenvector_and_either_sign():
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    A = (Q * np.arange(1.0, 7.0)) @ Q.T
    for sign in (1.0, -1.0):
        y = sign * 2.0 * Q[:, 3]
        w, rho = spectral_weights(A[None], y[None])
        np.testing.assert_allclose(w[0], np.arange(1.0, 7.0), atol=1e-12)
        np.testing.assert_allclose(rho[0], 4.0 * (np.arange(6) == 3), atol=1e-12)


def test_zero_vector_and_one_by_one():
    rng = np.random.default_rng(2)
    A, _ = random_case(rng, 2, 5, 5)
    w, rho = spectral_weights(A, np.zeros((2, 5)))
    np.testing.assert_allclose(w, np.linalg.eigvalsh(A), atol=1e-12 * np.abs(w).max())
    assert np.all(rho == 0.0)
    w, rho = spectral_weights(np.array([[[3.0]], [[0.5]]]), np.array([[2.0], [-1.0]]))
    np.testing.assert_array_equal(w, [[3.0], [0.5]])
    np.testing.assert_array_equal(rho, [[4.0], [1.0]])


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="shape"):
        spectral_weights(np.zeros((2, 3, 3)), np.zeros((2, 4)))
