"""Receive coils: the noise covariance between coils, prewhitening, and simulated coil sensitivities (docs/mri.md,
"Multi-coil k-space").

A receive array's coils see correlated noise (they share the sample's noise and couple to each other). Every coil
model here assumes white noise of one variance per complex sample, so multi-coil k-space is first *prewhitened*:
with the noise covariance ``Psi = L L^H`` between coils (per complex sample), ``L^{-1}`` applied across the coils
makes the noise independent, of variance 1 per complex sample in every coil, and leaves the signal model linear
(the sensitivities are whitened with it: estimate them after prewhitening, or whiten them with the same ``L``).

``Psi`` comes from a noise scan (samples without excitation: :func:`noise_covariance`) or from the edges of the
field of view along the readout, where the object leaves the coil images empty
(:func:`noise_covariance_from_readout_edges`, the multi-coil form of
:func:`adaptcs.mri.noise.noise_from_readout_edges`, with the same check that the edges hold noise alone).

The coils' sensitivities come from the user, from the centre lines by ESPIRiT (:func:`espirit_maps`, sigpy's
``mri.app.EspiritCalib``), or for simulations from a birdcage model (:func:`simulated_sensitivities`).
"""

from __future__ import annotations

import numpy as np

from adaptcs.models._coil_moments import least_squares_image as least_squares_image  # public here
from adaptcs.mri.noise import edge_strips


def noise_covariance(noise: np.ndarray) -> np.ndarray:
    """The noise covariance between coils per complex sample from a noise scan: ``mean(n n^H)`` over the samples.

    Parameters
    ----------
    noise : ndarray of complex, shape (coils, ...)
        Samples of noise only (no excitation), coils first; zero mean.

    Returns
    -------
    ndarray of complex, shape (coils, coils)
        Hermitian; its diagonal is each coil's noise variance per complex sample (``E|n_c|^2``).
    """
    noise = np.asarray(noise)
    if noise.ndim < 2 or not np.iscomplexobj(noise) or not np.all(np.isfinite(noise)):
        raise ValueError(f"noise must be finite complex samples of shape (coils, ...); got {noise.dtype} "
                         f"{noise.shape}")
    samples = noise.reshape(noise.shape[0], -1)
    if samples.shape[1] < samples.shape[0]:
        raise ValueError(f"{samples.shape[1]} noise samples per coil cannot determine a {samples.shape[0]}-coil "
                         "covariance: give at least as many samples as coils (many more for a good estimate)")
    return samples @ samples.conj().T / samples.shape[1]


def noise_covariance_from_readout_edges(kspace_lines: np.ndarray, fraction: float = 0.125) -> np.ndarray:
    """The noise covariance between coils per complex sample from the object-free edges of the field of view along
    x (the multi-coil form of :func:`adaptcs.mri.noise.noise_from_readout_edges`).

    Every coil's measured lines are transformed along the readout (centred unitary inverse DFT: white noise stays
    white with the same covariance); the outer ``fraction`` of the x positions on each side is taken from every
    line, each coil's strips are checked to hold noise alone (neighbouring samples uncorrelated: ValueError
    otherwise, naming the coil), and the covariance is their sample covariance ``mean(h h^H)`` over the edge samples
    (zero-mean noise; not a robust estimate, so the check matters).

    Parameters
    ----------
    kspace_lines : ndarray of complex, shape (coils, m, nx)
        Measured lines of the centred k-space of every coil.
    fraction : float
        Share of the field of view used on each side, in (0, 0.5).

    Returns
    -------
    ndarray of complex, shape (coils, coils)
    """
    kspace_lines = np.asarray(kspace_lines)
    if kspace_lines.ndim != 3 or not np.iscomplexobj(kspace_lines):
        raise ValueError(f"kspace_lines must be complex of shape (coils, lines, nx); got {kspace_lines.dtype} "
                         f"{kspace_lines.shape}")
    edges = []
    for c, coil in enumerate(kspace_lines):
        try:
            edges.append(np.concatenate(edge_strips(coil, fraction), axis=1).ravel())
        except ValueError as exc:
            raise ValueError(f"coil {c}: {exc}") from None
    samples = np.stack(edges)  # (coils, edge samples)
    return samples @ samples.conj().T / samples.shape[1]


def whitening(covariance: np.ndarray) -> np.ndarray:
    """``L^{-1}`` of the noise covariance ``Psi = L L^H`` (Cholesky): applied across the coils it leaves noise of
    covariance I. ValueError unless ``covariance`` is a Hermitian positive definite (coils, coils) matrix."""
    covariance = np.asarray(covariance)
    if covariance.ndim != 2 or covariance.shape[0] != covariance.shape[1] or not np.all(np.isfinite(covariance)):
        raise ValueError(f"the noise covariance must be a finite square (coils, coils) matrix; got shape "
                         f"{covariance.shape}")
    scale = float(np.max(np.abs(covariance))) or 1.0
    if not np.allclose(covariance, covariance.conj().T, rtol=0.0, atol=1e-10 * scale):
        raise ValueError("the noise covariance must be Hermitian (Psi = Psi^H)")
    try:
        factor = np.linalg.cholesky(covariance)
    except np.linalg.LinAlgError:
        raise ValueError("the noise covariance is not positive definite (a coil without noise, or two coils that "
                         "are one): drop the coil, or give the covariance of a noise scan") from None
    return np.linalg.inv(factor)


def prewhiten(kspace: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    """Multi-coil data (or sensitivities) with the coils' noise made independent of variance 1 per complex sample:
    ``L^{-1}`` (:func:`whitening`) applied across the first axis. Shape (coils, ...) in and out."""
    kspace = np.asarray(kspace)
    white = whitening(covariance)
    if kspace.shape[:1] != white.shape[:1]:
        raise ValueError(f"the data have {kspace.shape[0]} coils; the noise covariance is for {white.shape[0]}")
    return np.tensordot(white, kspace, axes=(1, 0))


def simulated_sensitivities(n_coils: int, shape: tuple[int, int]) -> np.ndarray:
    """Sensitivities of a simulated birdcage receive array (sigpy's ``mri.birdcage_maps``: coils on a circle around
    the field of view, smooth complex maps whose root sum of squares is 1 at every pixel), shape (n_coils, ny, nx).
    Maps of one array on two grids sample the same continuous maps."""
    import sigpy.mri

    if n_coils < 1:
        raise ValueError(f"n_coils must be a positive integer; got {n_coils}")
    return np.asarray(sigpy.mri.birdcage_maps((int(n_coils), int(shape[0]), int(shape[1]))), dtype=complex)


def ring_correlation(n_coils: int, rho: float) -> np.ndarray:
    """A receive array's noise correlation between coils on a ring: ``rho ** d`` for coils ``d`` places apart around
    it (neighbours couple most), shape (n_coils, n_coils); ValueError unless it is positive definite."""
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"rho must lie in [0, 1); got {rho}")
    index = np.arange(n_coils)
    distance = np.abs(index[:, None] - index[None, :])
    correlation = rho ** np.minimum(distance, n_coils - distance).astype(float)
    if np.linalg.eigvalsh(correlation).min() <= 0.0:
        raise ValueError(f"a ring of {n_coils} coils with neighbour correlation {rho} is not a covariance")
    return correlation


def espirit_maps(kspace: np.ndarray, calibration: int, *, threshold: float = 0.02, kernel: int | None = None,
                 crop: float = 0.95) -> np.ndarray:
    """Coil sensitivities from the fully sampled centre of k-space by ESPIRiT (Uecker et al. 2014), with sigpy's
    ``mri.app.EspiritCalib``.

    Parameters
    ----------
    kspace : ndarray of complex, shape (coils, ny, nx)
        Centred k-space (prewhitened); only its central ``calibration`` phase encodes (and the central
        ``calibration`` readout positions) are used, so the other lines may be unmeasured (zeros).
    calibration : int
        The calibration region's width: the fully sampled centre lines (at least ``kernel + 2``).
    threshold, kernel, crop : float, int or None, float
        ESPIRiT's singular-value threshold, kernel width and eigenvalue crop (sigpy's ``thresh``, ``kernel_width``,
        ``crop``): pixels whose leading eigenvalue is below ``crop`` (outside the object) get sensitivity 0. The
        kernel defaults to ``min(6, calibration // 2)``: with 8 centre lines a kernel of 6 crops everything.

    Returns
    -------
    ndarray of complex, shape (coils, ny, nx)
        Sensitivities whose root sum of squares is 1 inside the object; defined up to one common phase per pixel,
        so combined images carry the maps' phase, not the object's alone.
    """
    import sigpy.mri.app

    kernel = min(6, int(calibration) // 2) if kernel is None else kernel
    kspace = np.asarray(kspace)
    if kspace.ndim != 3 or kspace.shape[0] < 2 or not np.iscomplexobj(kspace):
        raise ValueError(f"kspace must be complex of shape (coils, ny, nx) with at least 2 coils; got {kspace.dtype} "
                         f"{kspace.shape}")
    if not kernel + 2 <= calibration <= min(kspace.shape[1:]):
        raise ValueError(f"calibration must lie in {kernel + 2}..{min(kspace.shape[1:])} (fully sampled centre "
                         f"lines, more than the kernel of {kernel}); got {calibration}")
    app = sigpy.mri.app.EspiritCalib(kspace, calib_width=int(calibration), thresh=threshold, kernel_width=kernel,
                                     crop=crop, show_pbar=False)
    maps = np.asarray(app.run(), dtype=complex)
    if not np.any(maps):  # every pixel's eigenvalue below crop: seen with 8 lines and a kernel of 6
        raise ValueError(f"ESPIRiT found no sensitivity in {calibration} centre lines with a kernel of {kernel}: "
                         "calibrate on more lines or with a smaller kernel")
    return maps


def combine_coils(kspace: np.ndarray, covariance: np.ndarray, calibration: int) -> tuple[np.ndarray, np.ndarray]:
    """A fully sampled multi-coil k-space as one virtual coil: prewhitened (:func:`prewhiten`), the coil images
    combined with ESPIRiT sensitivities of the ``calibration`` centre lines (:func:`espirit_maps`),
    ``x = sum_c conj(m_c) x_c``, and transformed back.

    Inside the object (the maps' root sum of squares 1) the combined image's noise is white of variance 1 per complex
    sample, the whitened coils' variance; outside it the maps are 0 and so is the image. A line model fitted on the
    result (noise variance 1) sees the coils' SNR but not their separate encoding: it designs for one coil.

    Returns
    -------
    kspace : ndarray of complex, shape (ny, nx)
        The virtual coil's centred k-space.
    maps : ndarray of complex, shape (coils, ny, nx)
        The ESPIRiT sensitivities used (of the prewhitened coils).
    """
    from adaptcs.bases.separable import to_image, to_kspace

    white = prewhiten(kspace, covariance)
    maps = espirit_maps(white, calibration)
    combined = np.sum(np.conj(maps) * np.array([to_image(k) for k in white]), axis=0)
    return to_kspace(combined), maps
