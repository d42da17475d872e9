"""What one more k-space line does to a block-diagonal Gaussian posterior, column by column: the exact information
gain of each candidate line and the error of the posterior mean after it. Shared by the line models
(:class:`adaptcs.models.line_spike_slab.LineSpikeSlab` with EP's sites held,
:class:`adaptcs.models.line_phase.PhaseLineGaussian`).

Every column q of unknowns (b real numbers) has the posterior covariance ``V_q = diag(lam_q) - G_q^T G_q`` (``G_q``
the whitened factor of the measured rows, (r, b)) and mean ``m_q``. A candidate line adds to column q two real rows,
``R1`` and ``R2`` (the real and imaginary part of its complex row), each with noise variance ``s``. Rows may be the
same for every column (shape (1, k, b)) or differ (shape (nq, k, b)).
"""

from __future__ import annotations

import numpy as np


def checked_candidates(candidates, kspace_candidates, shape: tuple[int, int], image=None):
    """Candidate lines as an int array (k,) and their values as an array (k, nx), checked against the image
    ``shape`` (ny, nx) (and ``image``, if given, too); ValueError naming what does not fit."""
    ny, nx = shape
    candidates = np.atleast_1d(np.asarray(candidates, dtype=np.intp))
    kspace_candidates = np.asarray(kspace_candidates)
    if kspace_candidates.shape != (candidates.shape[0], nx):
        raise ValueError(f"need kspace_candidates of shape ({candidates.shape[0]}, {nx}); got "
                         f"{kspace_candidates.shape}")
    if image is not None and np.shape(image) != (ny, nx):
        raise ValueError(f"need an image of shape ({ny}, {nx}); got {np.shape(image)}")
    return candidates, kspace_candidates


def _times_cov(factor: np.ndarray, prior_var: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``V_q R^T`` for every column: (nq, b, k)."""
    rows_t = rows.transpose(0, 2, 1)
    return prior_var[:, :, None] * rows_t - np.matmul(factor.transpose(0, 2, 1), np.matmul(factor, rows_t))


def gains_of_lines(factor: np.ndarray, prior_var: np.ndarray, R1: np.ndarray, R2: np.ndarray, s: float) -> np.ndarray:
    """Exact information gain (nats) of each candidate line: ``sum_q 1/2 log det(I_2 + B_kq V_q B_kq^T / s)``.

    Parameters
    ----------
    factor : ndarray, shape (nq, r, b)
    prior_var : ndarray, shape (nq, b)
    R1, R2 : ndarray, shape (1 or nq, k, b)
        The real rows of each candidate line (real part, imaginary part).
    s : float
        Noise variance of each real row.

    Returns
    -------
    ndarray, shape (k,)
    """
    G1, G2 = np.matmul(factor, R1.transpose(0, 2, 1)), np.matmul(factor, R2.transpose(0, 2, 1))  # (nq, r, k)

    def quadratic(A, B, GA, GB):  # A_k V_q B_k^T for every column and candidate, with G A^T formed once
        return np.matmul(prior_var[:, None, :], (A * B).transpose(0, 2, 1))[:, 0, :] - np.einsum("qrk,qrk->qk", GA, GB)

    q11, q12, q22 = quadratic(R1, R1, G1, G1), quadratic(R1, R2, G1, G2), quadratic(R2, R2, G2, G2)
    det = (1.0 + q11 / s) * (1.0 + q22 / s) - (q12 / s) ** 2
    return 0.5 * np.sum(np.log(det), axis=0)


def _steps(mean, factor, prior_var, R1, R2, values, s) -> np.ndarray:
    """``V B^T (B V B^T + s I_2)^{-1} (z - B m)`` for every column and candidate: (nq, b, k)."""
    nq, b = mean.shape
    k = values.shape[0]
    R1, R2 = np.broadcast_to(R1, (nq, k, b)), np.broadcast_to(R2, (nq, k, b))
    U1, U2 = _times_cov(factor, prior_var, R1), _times_cov(factor, prior_var, R2)  # (nq, b, k)
    S11 = np.einsum("qbk,qkb->qk", U1, R1) + s
    S12 = np.einsum("qbk,qkb->qk", U2, R1)
    S22 = np.einsum("qbk,qkb->qk", U2, R2) + s
    rho1 = values.real.T - np.einsum("qb,qkb->qk", mean, R1)  # (nq, k)
    rho2 = values.imag.T - np.einsum("qb,qkb->qk", mean, R2)
    det = S11 * S22 - S12 * S12
    a1, a2 = (S22 * rho1 - S12 * rho2) / det, (S11 * rho2 - S12 * rho1) / det
    return U1 * a1[:, None, :] + U2 * a2[:, None, :]


def means_after_lines(mean: np.ndarray, factor: np.ndarray, prior_var: np.ndarray, R1: np.ndarray, R2: np.ndarray,
                      values: np.ndarray, s: float) -> np.ndarray:
    """The posterior mean after measuring each candidate line alone, ``m' = m + V B^T (B V B^T + s I_2)^{-1}
    (z - B m)`` per column: shape (nq, b, k). Arguments as in :func:`errors_after_lines`."""
    return mean[:, :, None] + _steps(mean, factor, prior_var, R1, R2, values, s)


def errors_after_lines(mean: np.ndarray, truth: np.ndarray, factor: np.ndarray, prior_var: np.ndarray,
                       R1: np.ndarray, R2: np.ndarray, values: np.ndarray, s: float) -> np.ndarray:
    """Squared error ``sum_q |m'_q - c_q|^2`` of the posterior mean after measuring each candidate line alone
    (:func:`means_after_lines`), without forming the new means.

    Parameters
    ----------
    mean, truth : ndarray, shape (nq, b)
        The posterior mean and the true unknowns.
    factor, prior_var, R1, R2, s
        As in :func:`gains_of_lines`.
    values : ndarray of complex, shape (k, nq)
        Each candidate's measured values in every column (real part for ``R1``, imaginary part for ``R2``).

    Returns
    -------
    ndarray, shape (k,)
    """
    error = mean - truth
    step = _steps(mean, factor, prior_var, R1, R2, values, s)  # (nq, b, k)
    change = 2.0 * np.einsum("qb,qbk->k", error, step) + np.einsum("qbk,qbk->k", step, step)
    return float(np.sum(error * error)) + change
