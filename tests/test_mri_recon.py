"""The reconstructors of fixed masks (adaptcs.mri.recon), each against an independent ground truth."""

import numpy as np
import pytest

from adaptcs.bases.separable import to_image, to_kspace
from adaptcs.mri.masks import centre_lines, partial_fourier
from adaptcs.mri.recon import (
    l1_wavelet_sigpy,
    pocs_partial_fourier,
    symmetric_half_width,
    total_variation_sigpy,
)


def _phantom(n=32, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:n, :n] / n
    magnitude = ((y - 0.5) ** 2 + (x - 0.5) ** 2 < 0.12).astype(float) + 0.5 * ((y - 0.4) ** 2 + (x - 0.6) ** 2 < 0.01)
    phase = 0.8 * np.cos(2 * np.pi * (y + rng.uniform())) + 0.5 * np.sin(2 * np.pi * x)
    return magnitude * np.exp(1j * phase)


def test_sigpy_reconstructions_keep_every_line_of_a_full_scan():
    image = _phantom()
    kspace = to_kspace(image)
    lines = np.arange(32)
    # no penalty, all lines: the inverse FFT (sigpy's TV runs a primal-dual method, which needs more iterations)
    np.testing.assert_allclose(l1_wavelet_sigpy(kspace, lines, image.shape, 0.0, max_iter=5), image, atol=1e-10)
    np.testing.assert_allclose(total_variation_sigpy(kspace, lines, image.shape, 0.0, max_iter=300), image,
                               atol=1e-10)


def test_sigpy_penalty_is_that_of_its_objective():
    # with every line measured the L1-wavelet problem is denoising in an orthonormal basis: soft thresholding
    import pywt

    image = _phantom()
    noisy = to_kspace(image) + 0.05 * (np.random.default_rng(1).normal(size=(32, 32)) + 0j)
    lam = 0.1
    coeffs = pywt.wavedec2(to_image(noisy), "db4", mode="zero", level=None)
    arr, slices = pywt.coeffs_to_array(coeffs)
    shrunk = np.exp(1j * np.angle(arr)) * np.maximum(np.abs(arr) - lam, 0.0)
    expected = pywt.waverec2(pywt.array_to_coeffs(shrunk, slices, output_format="wavedec2"), "db4", mode="zero")
    expected = expected[:32, :32]
    got = l1_wavelet_sigpy(noisy, np.arange(32), (32, 32), lam, max_iter=200)
    assert np.linalg.norm(got - expected) < 0.05 * np.linalg.norm(expected)


def test_pocs_recovers_a_partial_fourier_scan_of_a_smooth_phase_image():
    image = _phantom(64)
    kspace = to_kspace(image)
    lines = partial_fourier(64, 40, 0.75)  # 10 lines below ky = 0, 30 from it up
    zero_filled = to_image(np.where(np.isin(np.arange(64), lines)[:, None], kspace, 0.0))
    pocs = pocs_partial_fourier(kspace[lines], lines, (64, 64))
    error = np.linalg.norm(np.abs(pocs) - np.abs(image))
    assert error < 0.5 * np.linalg.norm(np.abs(zero_filled) - np.abs(image))
    np.testing.assert_allclose(to_kspace(pocs)[lines], kspace[lines], atol=1e-12)  # the measured lines kept


def test_pocs_needs_a_symmetric_centre():
    rows = np.zeros(16, bool)
    rows[centre_lines(16, 5)] = True
    assert symmetric_half_width(rows) == 2
    rows[8 + 2] = False
    assert symmetric_half_width(rows) == 1
    with pytest.raises(ValueError, match="symmetric centre"):
        pocs_partial_fourier(np.zeros((4, 16), complex), np.flatnonzero(rows), (16, 16))
    with pytest.raises(ValueError, match="shape"):
        pocs_partial_fourier(np.zeros((3, 16), complex), np.flatnonzero(rows), (16, 16))
