"""Reconstruction quality measures."""

from __future__ import annotations

import numpy as np


def relative_error(w_hat, w_true, norm_true: float | None = None) -> float:
    """``||w_hat - w_true||_2 / ||w_true||_2`` (the error metric of every experiment).

    Parameters
    ----------
    w_hat, w_true : array-like, shape (d,)
    norm_true : float, optional
        ``||w_true||_2`` if already known.
    """
    w_hat = np.asarray(w_hat, dtype=float)
    w_true = np.asarray(w_true, dtype=float)
    if w_hat.shape != w_true.shape:
        raise ValueError(f"w_hat has shape {w_hat.shape} but w_true has {w_true.shape}")
    norm_true = float(np.linalg.norm(w_true)) if norm_true is None else norm_true
    if norm_true == 0.0:
        raise ValueError("w_true is zero: the relative error is undefined")
    return float(np.linalg.norm(w_hat - w_true) / norm_true)


def image_quality(w_hat, w_true, shape: tuple[int, int], region=None) -> tuple[float, float]:
    """PSNR (dB) and SSIM of an image reconstruction, with pixel values in [0, 1].

    The estimate is clipped to [0, 1] first (a linear estimator can leave the pixel range; the true image
    is in it). Uses scikit-image with data range 1. With a ``region``, both are taken inside it only (the mean
    squared error over its pixels, SSIM's map averaged over them) and nothing is clipped: k-space lines score
    magnitudes (never negative) over the brain, whose largest true value is 1, as
    :func:`magnitude_scores` does.

    Parameters
    ----------
    w_hat, w_true : array-like, shape (h * w,)
        Row-major pixels.
    shape : (h, w)
    region : array-like of bool, shape (h * w,), optional
        The pixels scored (all when None).
    """
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    truth = np.asarray(w_true, dtype=float).reshape(shape)
    if region is None:
        estimate = np.clip(np.asarray(w_hat, dtype=float), 0.0, 1.0).reshape(shape)
        return (float(peak_signal_noise_ratio(truth, estimate, data_range=1.0)),
                float(structural_similarity(truth, estimate, data_range=1.0)))
    estimate = np.asarray(w_hat, dtype=float).reshape(shape)
    inside = np.asarray(region, dtype=bool).reshape(shape)
    _, ssim_map = structural_similarity(truth, estimate, data_range=1.0, full=True)
    return (float(peak_signal_noise_ratio(truth[inside], estimate[inside], data_range=1.0)),
            float(ssim_map[inside].mean()))


def magnitude_scores(image: np.ndarray, reference: np.ndarray, mask: np.ndarray | None = None) -> tuple[float, float]:
    """(relative l2 error, PSNR in dB) of the magnitude of ``image`` against ``reference``, inside ``mask``
    (everywhere when None); the PSNR's peak is the reference's largest magnitude there.

    Parameters
    ----------
    image, reference : ndarray, shape (ny, nx), complex or real
    mask : ndarray of bool, shape (ny, nx), optional
    """
    ref = np.abs(reference) if mask is None else np.abs(reference)[mask]
    est = np.abs(image) if mask is None else np.abs(image)[mask]
    mse = float(np.mean((est - ref) ** 2))
    return float(np.linalg.norm(est - ref) / np.linalg.norm(ref)), float(10 * np.log10(ref.max() ** 2 / mse))
