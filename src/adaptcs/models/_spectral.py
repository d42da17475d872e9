"""Eigenvalues of symmetric matrices and the weights of one vector on their eigenvectors, without the eigenvectors.

A Gaussian model's evidence as a function of its scale ``v`` needs, per block, the eigenvalues ``w`` of a symmetric
``A`` and the squared projections ``rho_j = (u_j^T y)^2`` of one vector ``y`` on its eigenvectors ``u_j``; never the
eigenvectors themselves. A Householder reflection ``P`` with ``P y = alpha |y| e_1`` (``alpha = +-1``), then LAPACK's
reduction of ``P A P`` to a tridiagonal ``T = Q^T P A P Q`` (``sytrd``, lower storage, whose ``Q`` keeps ``e_1``:
``Q e_1 = e_1``), then ``T = V diag(w) V^T`` (divide and conquer, ``stevd``) give ``u_j = P Q V e_j`` and so
``u_j^T y = alpha |y| V[0, j]``: ``rho_j = |y|^2 V[0, j]^2``. The reduction costs ``4/3 n^3`` flops and the
tridiagonal problem less; ``numpy.linalg.eigh`` also transforms the eigenvectors back (``2 n^3`` more): 15 ms
against 29 ms at n = 512 (one BLAS thread, ``benchmarks/bench_spectral.py``, docs/log/speed.md).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import lapack


def spectral_weights(A: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues of every symmetric ``A[i]`` and the squared weights of ``y[i]`` on its eigenvectors.

    Parameters
    ----------
    A : ndarray, shape (k, n, n)
        Symmetric matrices.
    y : ndarray, shape (k, n)
        One vector per matrix.

    Returns
    -------
    w : ndarray, shape (k, n)
        Eigenvalues of each ``A[i]``, ascending.
    rho : ndarray, shape (k, n)
        ``(u_j^T y[i])^2`` for the unit eigenvector ``u_j`` of ``w[i, j]``; they sum to ``|y[i]|^2``.
    """
    A, y = np.asarray(A, dtype=np.float64), np.asarray(y, dtype=np.float64)
    k, n = y.shape
    if A.shape != (k, n, n):
        raise ValueError(f"A must have shape (k, n, n) = {(k, n, n)} to match y; got {A.shape}")
    w, rho = np.empty((k, n)), np.empty((k, n))
    if n == 1:
        w[:], rho[:] = A[:, :, 0], y * y
        return w, rho
    lwork = max(int(lapack.dsytrd_lwork(n, lower=1)[0]), n)
    for i in range(k):
        norm = float(np.linalg.norm(y[i]))
        b = A[i].copy()
        if norm > 0.0:
            v = y[i] / norm
            v[0] += 1.0 if v[0] >= 0.0 else -1.0  # P = I - 2 v v^T / v^T v takes y to -sign(y_0) |y| e_1
            beta = 2.0 / float(v @ v)
            p = beta * (b @ v)
            q = p - 0.5 * beta * float(v @ p) * v
            b -= np.outer(v, q) + np.outer(q, v)  # P A P, a symmetric rank-2 update
        _, d, e, _, info = lapack.dsytrd(b, lower=1, lwork=lwork, overwrite_a=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"tridiagonal reduction failed (LAPACK info {info})")
        values, V, info = lapack.dstevd(d, e)
        if info != 0:
            raise np.linalg.LinAlgError(f"tridiagonal eigenproblem failed (LAPACK info {info})")
        w[i], rho[i] = values, norm * norm * V[0] ** 2
    return w, rho
