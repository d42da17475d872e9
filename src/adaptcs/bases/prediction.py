"""The wavelet prediction of detail coefficients from the coarser scales (Rousset et al., IEEE TCI 2017), and which
coefficients rows of basis images measure: what the prediction scan (:mod:`adaptcs.design.prediction`) and the
prior that knows the prediction (:class:`adaptcs.models.WaveletTreeSpikeSlab`) share."""

from __future__ import annotations

import functools
import warnings

import numpy as np
from scipy import ndimage

from adaptcs.bases.images import WaveletBasis


def check_prediction_basis(basis) -> WaveletBasis:
    """``basis`` if the prediction scan can use it (a wavelet basis); ValueError otherwise."""
    if not isinstance(basis, WaveletBasis):
        given = type(basis).__name__ if basis is not None else None
        raise ValueError("strategy='predict' scans the coefficients of a wavelet basis; give basis=make_basis("
                         f"'haar', side) (or db2, db4, bior2.2, bior4.4); got {given}")
    return basis


def predicted_coefficients(basis: WaveletBasis, coef: np.ndarray) -> np.ndarray:
    """Each detail coefficient predicted from the coarser scales of ``coef``; the approximation as given.

    For detail level ``j``, the image of the scales below ``j`` is averaged down to that level's resolution
    (exact for Haar, whose coarse image is constant on the blocks), interpolated back to full resolution by
    periodic cubic splines (``scipy.ndimage.zoom``, ``grid-wrap``), and transformed: its level-``j``
    coefficients are the prediction.

    Every step is linear and acts on the two image axes alike, so the map from the approximation at level ``j``'s
    resolution (``s x s``) to each of its three detail subbands is ``F_a A F_b^T`` with two ``s x s`` matrices
    (:func:`_level_operators`, built once per basis from the 1-D transforms): O(s^3) per level instead of the
    full-resolution synthesis, zoom and analysis. Equal to that definition to round-off (tested).

    Parameters
    ----------
    basis : WaveletBasis
    coef : ndarray, shape (d,)
        Current estimate of the coefficients (measured ones, or a reconstruction's).

    Returns
    -------
    ndarray, shape (d,)
        Scale 0 is ``coef``'s; scale ``j >= 1`` the prediction from scales ``< j``.
    """
    import pywt

    coef = np.asarray(coef, dtype=float)
    subbands = basis.subbands(coef)
    predicted = np.empty(basis.d)
    approximation = subbands[0]
    predicted[:approximation.size] = approximation.ravel()
    start = approximation.size
    for level, details in enumerate(subbands[1:], start=1):
        low_pass, high_pass = _level_operators(basis.wavelet, basis.side, basis.level, level)
        along_low, along_high = approximation @ low_pass.T, approximation @ high_pass.T
        # pywt's (horizontal, vertical, diagonal) = detail along axis 0 / axis 1 / both; interleaved per position
        predicted[start:start + 3 * approximation.size] = np.stack(
            [high_pass @ along_low, low_pass @ along_high, high_pass @ along_high], axis=-1).ravel()
        start += 3 * approximation.size
        approximation = pywt.idwt2((approximation, details), basis.wavelet, mode="periodization")
    return predicted


@functools.lru_cache(maxsize=64)
def _level_operators(wavelet: str, side: int, depth: int, level: int) -> tuple[np.ndarray, np.ndarray]:
    """The 1-D maps of :func:`predicted_coefficients` at detail level ``level``, each ``s x s`` (``s`` the
    level's side): from the approximation at that resolution to the approximation (``low_pass``) and the detail
    (``high_pass``) of its prediction, i.e. synthesis up to ``side``, block mean, cubic-spline zoom, analysis back
    down to ``s``, along one axis."""
    import pywt

    s = side >> (depth - level + 1)
    steps = depth - level + 1  # dyadic levels between s and side
    block = side // s
    unit = np.eye(s)
    with warnings.catch_warnings():
        # deeper than dwt_max_level only means every coefficient sees the periodic boundary
        warnings.filterwarnings("ignore", message="Level value of .* is too high")
        coarse = pywt.waverec([unit] + [np.zeros((s << k, s)) for k in range(steps)], wavelet,
                              mode="periodization", axis=0)
        low = coarse.reshape(s, block, s).mean(axis=1)
        smooth = np.stack([ndimage.zoom(column, block, order=3, mode="grid-wrap", grid_mode=True)
                           for column in low.T], axis=1)
        analysed = pywt.wavedec(smooth, wavelet, mode="periodization", level=steps, axis=0)
    low_pass, high_pass = analysed[0], analysed[1]
    low_pass.setflags(write=False)
    high_pass.setflags(write=False)
    return low_pass, high_pass


def single_coefficient_rows(coefficient_rows: np.ndarray, rtol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Which rows are a multiple of one basis image, and of which one.

    Parameters
    ----------
    coefficient_rows : ndarray, shape (n, d)
        The rows in coefficient space (:meth:`adaptcs.bases.images.Basis.row_coefficients` of the pixel rows).
    rtol : float
        Entries below ``rtol`` times a row's largest count as zero (round-off of the transforms).

    Returns
    -------
    single : ndarray of bool, shape (n,)
        The row has exactly one non-zero coefficient.
    column : ndarray of int, shape (n,)
        The row's largest coefficient (its basis image where ``single``).
    """
    magnitude = np.abs(coefficient_rows)
    column = magnitude.argmax(axis=1) if coefficient_rows.shape[0] else np.zeros(0, dtype=np.intp)
    peak = magnitude[np.arange(coefficient_rows.shape[0]), column]
    single = (np.sum(magnitude > rtol * peak[:, None], axis=1) == 1) & (peak > 0)
    return single, column


def measured_coefficients(coefficient_rows: np.ndarray, rtol: float = 1e-9) -> np.ndarray:
    """Which coefficients the rows measure directly (rows that are a multiple of one basis image).

    Parameters
    ----------
    coefficient_rows : ndarray, shape (n, d)
        The rows in coefficient space (:meth:`adaptcs.bases.images.Basis.row_coefficients` of the pixel rows).
    rtol : float
        Entries below ``rtol`` times a row's largest count as zero (round-off of the transforms).

    Returns
    -------
    ndarray of bool, shape (d,)
    """
    measured = np.zeros(coefficient_rows.shape[1], dtype=bool)
    single, column = single_coefficient_rows(coefficient_rows, rtol)
    measured[column[single]] = True
    return measured
