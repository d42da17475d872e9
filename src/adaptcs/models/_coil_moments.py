"""A receive array's line moments: every line's covariance and pseudo-covariance of its coil values in every column
of pixels, computed by one FFT per coil, downdated as lines are added, and the exact gains from them; and the real
and widely linear forms of a column's covariance (:mod:`adaptcs.models.line_coils`).

With the phased maps ``e_c = s_c exp(i phi)`` (coils, ny, nx) and a column's image-space covariance ``Sigma`` and
pseudo-covariance ``Gamma`` (of ``u = exp(-i phi) x``), line ``ky``'s coil values have covariance
``(F diag(e_c) Sigma diag(conj e_c') F^H)[ky, ky]`` and pseudo-covariance ``(F diag(e_c) Gamma diag(e_c') F^T)[ky, ky]``
(``F`` the centred DFT along y), ``C x C`` each; the gain of the line is ``sum_x 1/2 log det(I_2C + M_x / s)`` with
``M_x`` their real form.
"""

from __future__ import annotations

import numpy as np
import scipy.fft

COLUMNS_PER_CHUNK = 2  # columns of pixels per stacked product (C ny^2 complex each: cache-sized)


def check_sensitivities(sensitivities, shape: tuple[int, int]) -> np.ndarray:
    """The coils' sensitivities as complex (coils, ny, nx); ValueError unless they are finite, of the image's shape
    and not all zero at every pixel of some coil."""
    maps = np.asarray(sensitivities)
    if maps.ndim == 2:
        maps = maps[None]
    if maps.ndim != 3 or maps.shape[1:] != tuple(shape) or not np.all(np.isfinite(maps)):
        raise ValueError(f"sensitivities must be finite of shape (coils, {shape[0]}, {shape[1]}); got "
                         f"{maps.shape}")
    if not np.all(np.any(maps != 0, axis=(1, 2))):
        raise ValueError("a coil's sensitivity is 0 everywhere: drop that coil")
    return maps.astype(complex)


def seen_pixels(sensitivities: np.ndarray) -> np.ndarray:
    """Pixels some coil sees: ``sum_c |s_c|^2`` above ``1e-12`` of its maximum; ``sensitivities`` (coils, ny, nx),
    returns bool (ny, nx)."""
    power = np.sum(np.abs(sensitivities) ** 2, axis=0)
    return power > 1e-12 * power.max()


def least_squares_image(coil_images: np.ndarray, sensitivities: np.ndarray) -> np.ndarray:
    """The least-squares image of fully sampled coil images, ``sum_c conj(s_c) x_c / sum_c |s_c|^2`` (SENSE with every
    line), 0 where no coil sees the pixel (:func:`seen_pixels`).

    Parameters
    ----------
    coil_images, sensitivities : ndarray of complex, shape (coils, ny, nx)
        Each coil's image and its sensitivity (both prewhitened, or neither).

    Returns
    -------
    ndarray of complex, shape (ny, nx)
    """
    combined = np.sum(np.conj(sensitivities) * coil_images, axis=0)
    power = np.sum(np.abs(sensitivities) ** 2, axis=0)
    return np.divide(combined, power, out=np.zeros_like(combined), where=seen_pixels(sensitivities))


def real_form_stack(H: np.ndarray) -> np.ndarray:
    """``[[Re H, -Im H], [Im H, Re H]]`` for a stack of complex (k, n, n): shape (k, 2n, 2n), so that
    ``z^H H z = [Re z; Im z]^T (.) [Re z; Im z]`` for Hermitian ``H``."""
    k, n, _ = H.shape
    out = np.empty((k, 2 * n, 2 * n))
    out[:, :n, :n] = out[:, n:, n:] = H.real
    out[:, :n, n:] = -H.imag
    out[:, n:, :n] = H.imag
    return out


def widely_linear(V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The covariance ``E[u u^H]`` and pseudo-covariance ``E[u u^T]`` of ``u = p + i q`` from the real covariance
    ``V`` of ``[p; q]``, shape (k, 2n, 2n) -> two complex (k, n, n)."""
    n = V.shape[-1] // 2
    pp, pq, qp, qq = V[:, :n, :n], V[:, :n, n:], V[:, n:, :n], V[:, n:, n:]
    return pp + qq + 1j * (qp - pq), pp - qq + 1j * (qp + pq)


def real_covariance(sigma: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """Inverse of :func:`widely_linear`: the real covariance of ``[Re u; Im u]``, shape (..., 2n, 2n)."""
    top = np.concatenate([(sigma + gamma).real, (gamma - sigma).imag], axis=-1)
    bottom = np.concatenate([(sigma + gamma).imag, (sigma - gamma).real], axis=-1)
    return 0.5 * np.concatenate([top, bottom], axis=-2)


def line_moments(phased: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every line's (centred rows) coil covariance and pseudo-covariance in every column, from the real covariance
    ``cov`` (nx, 2ny, 2ny) of each column's ``[Re u; Im u]`` and the phased maps ``phased`` (C, ny, nx): two complex
    (nx, ny, C, C).

    The centred DFT's row ky is (-1)^(ky - ny/2) times the plain DFT's row (ky - ny/2) mod ny (ny even); the sign
    cancels in both products, so plain FFTs serve."""
    C, ny, nx = phased.shape
    dft = np.exp(-2j * np.pi * np.outer(np.arange(ny), np.arange(ny)) / ny) / np.sqrt(ny)  # D, (ny, ny)
    centred = (np.arange(ny) - ny // 2) % ny
    work = np.empty((COLUMNS_PER_CHUNK, C, ny, ny), complex)  # reused: no page faults per chunk
    line_cov, line_pseudo = np.empty((nx, ny, C, C), complex), np.empty((nx, ny, C, C), complex)
    for lo in range(0, nx, COLUMNS_PER_CHUNK):
        cols = slice(lo, min(lo + COLUMNS_PER_CHUNK, nx))
        sigma, gamma = widely_linear(cov[cols])  # (n, ny, ny) each
        e = np.moveaxis(phased[:, :, cols], 2, 0)  # (n, C, ny)
        buffer = work[:e.shape[0]]
        line_cov[cols] = _moments(e, sigma, np.conj(e), np.conj(dft), buffer)[:, centred]
        line_pseudo[cols] = _moments(e, gamma, e, dft, buffer)[:, centred]
    return line_cov, line_pseudo


def _moments(e: np.ndarray, X: np.ndarray, right_maps: np.ndarray, right_rows: np.ndarray,
             work: np.ndarray) -> np.ndarray:
    """Per column and plain DFT row ``k``, ``sum_{j, l} D[k, j] e_c[j] X[j, l] right_maps[c', l] right_rows[k, l]``:
    with ``X`` = Sigma and the right-hand factors conjugated, the covariance of the line's coil values; with ``X`` =
    Gamma, their pseudo-covariance. Shape (n, ny, C, C).

    ``e`` (n, C, ny) the phased maps, ``X`` (n, ny, ny), ``right_rows`` (ny, ny) ``D`` or ``conj(D)``; ``work`` an
    (n, C, ny, ny) buffer. ``D diag(e_c) X`` is one FFT per coil along ``j``; the sum over ``l`` one matrix product
    per column and row."""
    np.multiply(e[:, :, :, None], X[:, None], out=work)  # (n, C, j, l): diag(e_c) X
    left = scipy.fft.fft(work, axis=2, norm="ortho", overwrite_x=True)  # (n, C, k, l)
    left *= right_rows
    return np.matmul(left.transpose(0, 2, 1, 3), right_maps.transpose(0, 2, 1)[:, None])


def downdate_line_moments(line_cov: np.ndarray, line_pseudo: np.ndarray, phased: np.ndarray,
                          gain: np.ndarray) -> None:
    """The line moments (changed in place) after ``V -= G^T G`` (``gain`` G, (nx, R, 2ny)): each real row
    ``[p, q]`` of G is the complex ``g = p + i q`` with ``Sigma -= g g^H``, ``Gamma -= g g^T``, so a line's moments
    lose ``h_c conj(h_c')`` and ``h_c h_c'`` with ``h_c = F_y (e_c o g)``: one FFT per coil and row,
    O(nx C R ny (log ny + C))."""
    ny = phased.shape[1]
    g = gain[:, :, :ny] + 1j * gain[:, :, ny:]  # (nx, R, ny)
    e = np.moveaxis(phased, 2, 0)  # (nx, C, ny)
    h = scipy.fft.fft(e[:, :, None, :] * g[:, None], axis=3, norm="ortho")  # (nx, C, R, plain rows)
    h = h[..., (np.arange(ny) - ny // 2) % ny].transpose(0, 3, 1, 2)  # (nx, centred rows, C, R)
    line_cov -= np.matmul(h, np.conj(h).transpose(0, 1, 3, 2))
    line_pseudo -= np.matmul(h, h.transpose(0, 1, 3, 2))


def gains_from_moments(line_cov: np.ndarray, line_pseudo: np.ndarray, s: float) -> np.ndarray:
    """``sum_x 1/2 log det(I_2C + M_x / s)`` per line, ``M_x`` the real covariance of the line's coil values in column
    x from its covariance and pseudo-covariance (each (nx, k, C, C)); ``s`` the noise variance per real value.
    Shape (k,)."""
    C = line_cov.shape[-1]
    M = np.empty((*line_cov.shape[:2], 2 * C, 2 * C))
    M[..., :C, :C] = (line_cov + line_pseudo).real
    M[..., :C, C:] = (line_pseudo - line_cov).imag
    M[..., C:, :C] = (line_cov + line_pseudo).imag
    M[..., C:, C:] = (line_cov - line_pseudo).real
    M *= 0.5 / s
    idx = np.arange(2 * C)
    M[..., idx, idx] += 1.0
    return 0.5 * np.sum(np.linalg.slogdet(M)[1], axis=0)
