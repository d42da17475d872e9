"""The reconstructors MRI users run on a fixed mask, beside the line models (docs/mri.md, "Reconstructors").

- :func:`l1_wavelet_sigpy` and :func:`total_variation_sigpy`: sigpy's ``mri.app.L1WaveletRecon`` and
  ``mri.app.TotalVariationRecon`` (single coil: a sensitivity of ones), the field's standard nonlinear
  reconstructions for random and variable-density masks (Lustig et al. 2007).
- :func:`l1_wavelet_sense`: the same L1-wavelet reconstruction with a receive array's sensitivities (L1-ESPIRiT with
  ESPIRiT's maps), the nonlinear reconstruction of its random and variable-density masks.
- :func:`cg_sense`: SENSE by conjugate gradients (Pruessmann et al. 2001; sigpy's ``mri.app.SenseRecon``), the
  reconstruction of a receive array's equispaced masks, with the coils' sensitivities; :func:`grappa_rss`: GRAPPA
  (Griswold et al. 2002; ``pygrappa``), the missing lines filled from the centre's calibration, combined by the root
  sum of squares.
- :func:`pocs_partial_fourier`: projection onto convex sets for partial Fourier (Haacke et al. 1991): the phase of
  the symmetric centre of k-space, then alternately the measured lines and that phase imposed on the image.

Every function takes the measured lines of the centred k-space (:mod:`adaptcs.bases.separable` convention, the same as
sigpy's centred orthonormal FFT) and returns the complex image, shape (ny, nx).
"""

from __future__ import annotations

import numpy as np

from adaptcs.bases.separable import to_image, to_kspace


def _measured(kspace_lines: np.ndarray, lines, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The zero-filled k-space (ny, nx) and the measured rows as a boolean (ny,), after checking the input."""
    ny, nx = shape
    lines = np.asarray(lines, dtype=np.intp)
    kspace_lines = np.asarray(kspace_lines)
    if kspace_lines.shape != (lines.shape[0], nx):
        raise ValueError(f"kspace_lines must have shape ({lines.shape[0]}, {nx}); got {kspace_lines.shape}")
    if np.any((lines < 0) | (lines >= ny)) or np.unique(lines).shape[0] != lines.shape[0]:
        raise ValueError(f"lines must be distinct rows of the centred k-space, 0..{ny - 1}")
    if not np.all(np.isfinite(kspace_lines)):
        raise ValueError("kspace_lines must be finite")
    data = np.zeros(shape, complex)
    data[lines] = kspace_lines
    rows = np.zeros(ny, bool)
    rows[lines] = True
    return data, rows


def _coil_data(kspace_lines, lines, sensitivities) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every coil's zero-filled k-space (coils, ny, nx), the sampling weights (ny, nx) and the sensitivities, after
    checking that the lines (coils, m, nx) and the sensitivities (coils, ny, nx) have the same coils."""
    sensitivities = np.asarray(sensitivities)
    kspace_lines = np.asarray(kspace_lines)
    if sensitivities.ndim != 3 or kspace_lines.ndim != 3 or kspace_lines.shape[0] != sensitivities.shape[0]:
        raise ValueError(f"kspace_lines (coils, m, nx) and sensitivities (coils, ny, nx) must have the same coils; "
                         f"got {kspace_lines.shape} and {sensitivities.shape}")
    shape = sensitivities.shape[1:]
    filled = [_measured(coil, lines, shape) for coil in kspace_lines]
    weights = np.broadcast_to(filled[0][1][:, None], shape).astype(float)
    return np.stack([f[0] for f in filled]), weights, sensitivities


def _sigpy_app(name: str):
    try:
        import sigpy.mri.app as app
    except ImportError as exc:  # pragma: no cover - sigpy is a dependency of the package
        raise ImportError(f"{name} needs sigpy (a dependency of adaptcs: pip install sigpy)") from exc
    return app


def l1_wavelet_sigpy(kspace_lines: np.ndarray, lines, shape: tuple[int, int], lam: float, *,
                     wavelet: str = "db4", max_iter: int = 100) -> np.ndarray:
    """sigpy's L1-wavelet reconstruction, ``min 1/2 |M F x - y|^2 + lam |W x|_1`` (W a 2-D PyWavelets transform).

    Parameters
    ----------
    kspace_lines : ndarray of complex, shape (m, nx)
    lines : array-like of int, shape (m,)
    shape : (ny, nx)
    lam : float
        Penalty, in the units of the k-space values (a multiple of the noise's standard deviation), >= 0.
    wavelet : str
    max_iter : int
        Iterations of sigpy's proximal gradient method.
    """
    if not lam >= 0.0:
        raise ValueError(f"lam must be non-negative; got {lam}")
    data, rows = _measured(kspace_lines, lines, shape)
    weights = np.broadcast_to(rows[:, None], shape).astype(float)
    app = _sigpy_app("l1_wavelet_sigpy").L1WaveletRecon(data[None], np.ones((1, *shape), complex), lam,
                                                        weights=weights, wave_name=wavelet, max_iter=max_iter,
                                                        show_pbar=False)
    return np.asarray(app.run())


def total_variation_sigpy(kspace_lines: np.ndarray, lines, shape: tuple[int, int], lam: float, *,
                          max_iter: int = 100) -> np.ndarray:
    """sigpy's total-variation reconstruction, ``min 1/2 |M F x - y|^2 + lam |grad x|_1`` (arguments as
    :func:`l1_wavelet_sigpy`)."""
    if not lam >= 0.0:
        raise ValueError(f"lam must be non-negative; got {lam}")
    data, rows = _measured(kspace_lines, lines, shape)
    weights = np.broadcast_to(rows[:, None], shape).astype(float)
    app = _sigpy_app("total_variation_sigpy").TotalVariationRecon(data[None], np.ones((1, *shape), complex), lam,
                                                                  weights=weights, max_iter=max_iter,
                                                                  show_pbar=False)
    return np.asarray(app.run())


def symmetric_half_width(rows: np.ndarray) -> int:
    """The largest h such that every row ky = -h..h (centred order, ky = 0 at ``ny // 2``) is measured; -1 when the
    centre itself is not."""
    centre = rows.shape[0] // 2
    h = -1
    while centre - h - 1 >= 0 and centre + h + 1 < rows.shape[0] and rows[centre - h - 1] and rows[centre + h + 1]:
        h += 1
    return h


def pocs_partial_fourier(kspace_lines: np.ndarray, lines, shape: tuple[int, int], *, n_iter: int = 50,
                         tol: float = 1e-6) -> np.ndarray:
    """POCS partial-Fourier reconstruction.

    The phase comes from the symmetric centre (rows ky = -h..h all measured, :func:`symmetric_half_width`, at
    least 2 lines each side), windowed by a Hann taper along ky; then, ``n_iter`` times or until the image
    changes by less than ``tol`` of its norm, the image's magnitude is given that phase and the measured lines are
    put back. On a mask that measures both sides it keeps what was measured and fills the rest by the phase
    constraint, so it also runs on masks that are not partial Fourier (it is not a compressed-sensing method).
    """
    data, rows = _measured(kspace_lines, lines, shape)
    h = symmetric_half_width(rows)
    if h < 2:
        raise ValueError("POCS needs a symmetric centre of at least 5 measured lines (ky = -2..2)")
    ny = shape[0]
    ky = np.arange(ny) - ny // 2
    taper = np.where(np.abs(ky) <= h, 0.5 * (1.0 + np.cos(np.pi * ky / (h + 1))), 0.0)
    phase = np.exp(1j * np.angle(to_image(data * taper[:, None])))
    image = to_image(data)
    for _ in range(n_iter):
        kspace = to_kspace(np.abs(image) * phase)
        kspace[rows] = data[rows]
        new = to_image(kspace)
        change = np.linalg.norm(new - image) / max(np.linalg.norm(new), np.finfo(float).tiny)
        image = new
        if change <= tol:
            break
    return image


def cg_sense(kspace_lines: np.ndarray, lines, sensitivities: np.ndarray, *, lam: float = 0.0,
             max_iter: int = 100) -> np.ndarray:
    """SENSE by conjugate gradients: ``min sum_c |M F (s_c x) - y_c|^2 + lam |x|^2`` (sigpy's ``mri.app.SenseRecon``).

    Parameters
    ----------
    kspace_lines : ndarray of complex, shape (coils, m, nx)
        Every coil's measured lines of the centred k-space (prewhitened: white noise of one variance).
    lines : array-like of int, shape (m,)
    sensitivities : ndarray of complex, shape (coils, ny, nx)
        The coils' sensitivities (prewhitened with the data).
    lam : float
        Tikhonov penalty (0: least squares, as CG-SENSE is usually run; CG's early stop regularises).
    max_iter : int
        Conjugate-gradient iterations.

    Returns
    -------
    ndarray of complex, shape (ny, nx)
    """
    if lam < 0:
        raise ValueError(f"lam must be >= 0; got {lam}")
    data, weights, sensitivities = _coil_data(kspace_lines, lines, sensitivities)
    app = _sigpy_app("cg_sense").SenseRecon(data, sensitivities, lamda=float(lam), weights=weights,
                                            max_iter=int(max_iter), show_pbar=False)
    return np.asarray(app.run(), dtype=complex)


def l1_wavelet_sense(kspace_lines: np.ndarray, lines, sensitivities: np.ndarray, lam: float, *,
                     wavelet: str = "db4", max_iter: int = 100) -> np.ndarray:
    """Compressed sensing with coils (L1-ESPIRiT when the sensitivities are ESPIRiT's; Uecker et al. 2014):
    ``min 1/2 sum_c |M F (s_c x) - y_c|^2 + lam |W x|_1`` by sigpy's ``mri.app.L1WaveletRecon``.

    Parameters
    ----------
    kspace_lines : ndarray of complex, shape (coils, m, nx)
        Every coil's measured lines of the centred k-space (prewhitened: white noise of one variance).
    lines : array-like of int, shape (m,)
    sensitivities : ndarray of complex, shape (coils, ny, nx)
        The coils' sensitivities (prewhitened with the data).
    lam : float
        Penalty, in the units of the k-space values (a multiple of the noise's standard deviation), >= 0.
    wavelet : str
    max_iter : int
        Iterations of sigpy's proximal gradient method.

    Returns
    -------
    ndarray of complex, shape (ny, nx)
    """
    if not lam >= 0.0:
        raise ValueError(f"lam must be non-negative; got {lam}")
    data, weights, sensitivities = _coil_data(kspace_lines, lines, sensitivities)
    app = _sigpy_app("l1_wavelet_sense").L1WaveletRecon(data, sensitivities, float(lam), weights=weights,
                                                       wave_name=wavelet, max_iter=int(max_iter), show_pbar=False)
    return np.asarray(app.run(), dtype=complex)


def grappa_rss(kspace_lines: np.ndarray, lines, shape: tuple[int, int], calibration, *,
               kernel: tuple[int, int] = (5, 5), lam: float = 0.01) -> np.ndarray:
    """GRAPPA (``pygrappa.grappa``): every coil's missing lines filled by kernels calibrated on the fully sampled
    centre, then the coil images combined by the root sum of squares (a magnitude image, as scanners show it).

    Parameters
    ----------
    kspace_lines : ndarray of complex, shape (coils, m, nx)
        Every coil's measured lines of the centred k-space.
    lines : array-like of int, shape (m,)
    shape : (ny, nx)
    calibration : array-like of int
        The contiguous centre lines to calibrate on (all of them among ``lines``).
    kernel : (int, int)
        The GRAPPA kernel's size (along y, x).
    lam : float
        Tikhonov penalty of the kernel fit (pygrappa's ``lamda``, relative).

    Returns
    -------
    ndarray of float, shape (ny, nx)
        The root-sum-of-squares image (with sensitivities whose root sum of squares is 1, the image's magnitude).
    """
    from pygrappa import grappa

    kspace_lines = np.asarray(kspace_lines)
    if kspace_lines.ndim != 3:
        raise ValueError(f"kspace_lines must have shape (coils, lines, nx); got {kspace_lines.shape}")
    filled = [_measured(coil, lines, shape) for coil in kspace_lines]
    calibration = np.asarray(calibration, dtype=np.intp)
    if not np.all(filled[0][1][calibration]) or np.any(np.diff(calibration) != 1):
        raise ValueError("calibration must be contiguous centre lines that were all measured")
    data = np.stack([f[0] for f in filled])
    completed = grappa(data, data[:, calibration], kernel_size=tuple(kernel), coil_axis=0, lamda=float(lam))
    images = np.array([to_image(k) for k in completed])
    return np.sqrt(np.sum(np.abs(images) ** 2, axis=0))
