"""Simulated k-space (one coil, or a simulated receive array) from a recorded MRI average: axial slices of the
Colin27 T1 (docs/mri.md, "Data").

No raw scanner k-space is used. Each slice (0.5 mm voxels, from Debian's ``mricron-data``; remade by
``scripts/make_colin27_slices.py``, copyright notice in ``adaptcs/data/COLIN27-COPYRIGHT``) is placed in a
256 mm x 256 mm field of view on a 512 x 512 grid, given a smooth random phase, transformed to k-space on that
fine grid and cropped to the central n x n samples (n = 256: 1 mm pixels; n = 128: 2 mm): the image on the
n x n grid is then not a pixel image the reconstruction grid can represent exactly (no "inverse crime").
Complex Gaussian noise is added in k-space at a stated level.

The phase comes in three regimes (:data:`PHASE_REGIMES`, docs/mri.md "Phase regimes"):

- ``"spin_echo"`` (the default, as it always was): smooth, cosines to 3 cycles per field of view, at most pi peak to
  peak: the receive coil's and the transmit field's phase, which a spin echo refocuses everything else of;
- ``"gradient_echo"``: a wider smooth field (2 pi peak to peak, the off-resonance of B0 over the head times the echo
  time) plus mid spatial frequencies, 4 to 10 cycles per field of view, 3 rad peak to peak (tissue susceptibility
  differences, veins): what a gradient echo does not refocus;
- ``"susceptibility"``: the spin-echo phase plus local bumps of 2 to 3 rad, 6 to 12 mm wide, centred on the brain's
  outline (air-tissue interfaces: the sinuses and ear canals sit just outside the brain).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import numpy as np

from adaptcs.bases.separable import to_image, to_kspace

FINE = 512  # fine grid (0.5 mm, a 256 mm field of view)
PHASE_TERMS = 3  # the smooth phase: cosines up to this spatial frequency (cycles per field of view) along each axis
PHASE_SPAN = np.pi  # its peak-to-peak range in radians (at most)


@dataclass(frozen=True)
class KSpaceSlice:
    """One simulated acquisition.

    Attributes
    ----------
    kspace : ndarray of complex, shape (n, n)
        Centred k-space with noise (:func:`adaptcs.bases.separable.to_kspace` convention).
    reference : ndarray of complex, shape (n, n)
        The image without noise (the inverse transform of the noise-free cropped k-space): what a reconstruction is
        compared with.
    mask : ndarray of bool, shape (n, n)
        The brain (where errors are measured).
    noise_var : float
        Variance of the complex noise per k-space sample (of every coil).
    name : str
    sensitivities : ndarray of complex, shape (coils, n, n), or None
        Multi-coil (``kspace`` then has shape (coils, n, n)): the coils' sensitivities on the n x n grid (the
        k-space was made from them on the fine grid); None for a single coil.
    noise_covariance : ndarray of complex, shape (coils, coils), or None
        Multi-coil: the noise covariance between coils per complex sample (its diagonal ``noise_var``).
    """

    kspace: np.ndarray
    reference: np.ndarray
    mask: np.ndarray
    noise_var: float
    name: str
    sensitivities: np.ndarray | None = None
    noise_covariance: np.ndarray | None = None


def colin27_slices(which: str = "test") -> tuple[np.ndarray, np.ndarray]:
    """The shipped slices: uint8 magnitudes of shape (k, 370, 301) at 0.5 mm and their axial indices, shape (k,).

    ``which``: "test" (8 slices, z = 100..240) or "train" (8 others, z = 110..250); the two never overlap."""
    if which not in ("test", "train"):
        raise ValueError(f"which must be 'test' or 'train'; got {which!r}")
    with resources.files("adaptcs.data").joinpath("colin27_slices.npz").open("rb") as fh, np.load(fh) as data:
        return data[which].copy(), data[f"{which}_z"].copy()


def smooth_phase(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A smooth random phase map (radians), shape ``shape``: a sum of low-frequency cosines with random amplitudes
    and shifts, scaled to a peak-to-peak range of :data:`PHASE_SPAN`."""
    ny, nx = shape
    y, x = np.meshgrid(np.arange(ny) / ny, np.arange(nx) / nx, indexing="ij")
    phase = np.zeros(shape)
    for fy in range(PHASE_TERMS + 1):
        for fx in range(PHASE_TERMS + 1):
            amp = rng.normal() / (1.0 + fy * fy + fx * fx)
            phase += amp * np.cos(2 * np.pi * (fy * y + fx * x) + rng.uniform(0, 2 * np.pi))
    return PHASE_SPAN * (phase - phase.min()) / (phase.max() - phase.min()) - PHASE_SPAN / 2


MID_TERMS = (4, 10)  # gradient echo: the band of mid spatial frequencies, cycles per field of view
MID_SPAN = 3.0  # their peak-to-peak range, radians
WIDE_SPAN = 2 * np.pi  # gradient echo: the smooth field's peak-to-peak range, radians
BUMPS = 3  # susceptibility: local bumps per slice
BUMP_RAD = (2.0, 3.0)  # their peak phase, radians (random sign)
BUMP_WIDTH_MM = (6.0, 12.0)  # their standard deviation, mm
FIELD_OF_VIEW_MM = 256.0


def _cosine_field(shape: tuple[int, int], frequencies: range, rng: np.random.Generator, span: float) -> np.ndarray:
    """A random sum of cosines of the given frequencies (cycles per field of view, along each axis and their sums),
    amplitudes decaying as 1 / (1 + f^2), scaled to a peak-to-peak range of ``span`` radians and centred on 0."""
    ny, nx = shape
    y, x = np.meshgrid(np.arange(ny) / ny, np.arange(nx) / nx, indexing="ij")
    phase = np.zeros(shape)
    for fy in frequencies:
        for fx in frequencies:
            amp = rng.normal() / (1.0 + fy * fy + fx * fx)
            phase += amp * np.cos(2 * np.pi * (fy * y + fx * x) + rng.uniform(0, 2 * np.pi))
    return span * (phase - phase.min()) / (phase.max() - phase.min()) - span / 2


def gradient_echo_phase(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """The gradient-echo-like phase (radians), shape ``shape``: a smooth field of :data:`WIDE_SPAN` peak to peak
    (as :func:`smooth_phase`) plus a random field of the spatial frequencies whose larger component lies in
    :data:`MID_TERMS` cycles per field of view (complex Gaussian amplitudes decaying as 1 / (1 + f^2)),
    :data:`MID_SPAN` peak to peak."""
    wide = _cosine_field(shape, range(PHASE_TERMS + 1), rng, WIDE_SPAN)
    lo, hi = MID_TERMS
    f = np.arange(-hi, hi + 1)
    fy, fx = np.meshgrid(f, f, indexing="ij")
    band = np.maximum(np.abs(fy), np.abs(fx)) >= lo
    spectrum = np.zeros(shape, complex)
    amplitude = (rng.normal(size=fy.shape) + 1j * rng.normal(size=fy.shape)) / (1.0 + fy**2 + fx**2)
    spectrum[fy[band] % shape[0], fx[band] % shape[1]] = amplitude[band]
    mid = np.real(np.fft.ifft2(spectrum))
    mid = MID_SPAN * (mid - mid.min()) / (mid.max() - mid.min()) - MID_SPAN / 2
    return wide + mid


def susceptibility_phase(brain: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The spin-echo phase (:func:`smooth_phase`) plus :data:`BUMPS` Gaussian bumps of :data:`BUMP_RAD` radians
    (random sign) and :data:`BUMP_WIDTH_MM` width, centred on points of the outline of ``brain`` (boolean, shape of
    the grid, :data:`FIELD_OF_VIEW_MM` across)."""
    phase = smooth_phase(brain.shape, rng)
    inside = brain.copy()
    inside[1:-1, 1:-1] = brain[1:-1, 1:-1] & brain[:-2, 1:-1] & brain[2:, 1:-1] & brain[1:-1, :-2] & brain[1:-1, 2:]
    outline = np.argwhere(brain & ~inside)
    if outline.shape[0] == 0:
        raise ValueError("the brain has no outline: no place for susceptibility bumps")
    mm = FIELD_OF_VIEW_MM / brain.shape[0]
    y, x = np.meshgrid(np.arange(brain.shape[0]), np.arange(brain.shape[1]), indexing="ij")
    for _ in range(BUMPS):
        cy, cx = outline[rng.integers(outline.shape[0])]
        width = rng.uniform(*BUMP_WIDTH_MM) / mm
        height = rng.uniform(*BUMP_RAD) * rng.choice([-1.0, 1.0])
        phase += height * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * width * width))
    return phase


#: The phase regimes of :func:`simulate`.
PHASE_REGIMES = ("spin_echo", "gradient_echo", "susceptibility")


def simulate(slice_u8: np.ndarray, n, *, noise: float, seed: int, name: str = "",
             phase: str = "spin_echo", coils: int | None = None, coil_correlation: float = 0.2) -> KSpaceSlice:
    """k-space of one slice on an n x n (or ny x nx) grid (a 256 mm field of view), with noise.

    Parameters
    ----------
    slice_u8 : ndarray, shape (h, w)
        Magnitude at 0.5 mm, h and w at most 512 (the slice is centred on the fine grid).
    n : int or (int, int)
        Output size n x n, or (ny, nx), each even and at most 512: the pixel size is 256 mm / n along each axis.
    noise : float
        Standard deviation of the complex noise per k-space sample (and so per pixel: the transform is unitary), as a
        fraction of the reference image's 99th magnitude percentile inside the brain.
    seed : int
        Seeds the phase and the noise (a local Generator).
    phase : {"spin_echo", "gradient_echo", "susceptibility"}
        The phase regime (module docstring); "spin_echo" draws the same phase and noise as before the regimes
        existed.
    coils : int, optional
        Simulate a receive array of this many coils (:func:`adaptcs.mri.coils.simulated_sensitivities`, a
        birdcage): every coil's image is the phased slice times its sensitivity on the fine grid, and the noise is
        correlated between coils (``coil_correlation`` between neighbours on the ring,
        :func:`adaptcs.mri.coils.ring_correlation`), ``noise`` the standard deviation of every coil's. None: one
        coil, drawn exactly as before coils existed.
    """
    if phase not in PHASE_REGIMES:
        raise ValueError(f"phase must be one of {PHASE_REGIMES}; got {phase!r}")
    ny, nx = (n, n) if np.ndim(n) == 0 else (int(n[0]), int(n[1]))
    if ny % 2 or nx % 2 or not (2 <= ny <= FINE and 2 <= nx <= FINE):
        raise ValueError(f"the output size must be even and at most {FINE} along each axis; got {n}")
    h, w = slice_u8.shape
    if h > FINE or w > FINE:
        raise ValueError(f"the slice must fit in {FINE} x {FINE}; got {slice_u8.shape}")
    rng = np.random.default_rng(seed)
    fine = np.zeros((FINE, FINE))
    top, left = (FINE - h) // 2, (FINE - w) // 2
    fine[top:top + h, left:left + w] = slice_u8 / 255.0
    brain = np.zeros((FINE, FINE), bool)
    brain[top:top + h, left:left + w] = slice_u8 > 0
    if phase == "spin_echo":
        phi = smooth_phase(fine.shape, rng)
    elif phase == "gradient_echo":
        phi = gradient_echo_phase(fine.shape, rng)
    else:
        phi = susceptibility_phase(brain, rng)
    image = fine * np.exp(1j * phi)
    lo_y, lo_x = (FINE - ny) // 2, (FINE - nx) // 2
    # cropping the centred unitary k-space from FINE^2 to ny nx samples scales the image by FINE / sqrt(ny nx)
    clean = to_kspace(image)[lo_y:lo_y + ny, lo_x:lo_x + nx] * (np.sqrt(ny * nx) / FINE)
    reference = to_image(clean)
    if FINE % ny == 0 and FINE % nx == 0:  # pixels that are more than half brain
        mask = brain.reshape(ny, FINE // ny, nx, FINE // nx).mean(axis=(1, 3)) > 0.5
    else:  # the brain at every pixel's centre on the fine grid
        centres_y = ((np.arange(ny) + 0.5) * FINE / ny).astype(np.intp)
        centres_x = ((np.arange(nx) + 0.5) * FINE / nx).astype(np.intp)
        mask = brain[np.ix_(centres_y, centres_x)]
    sigma = noise * float(np.percentile(np.abs(reference[mask]), 99))
    if coils is None:
        noisy = clean + sigma * np.sqrt(0.5) * (rng.normal(size=clean.shape) + 1j * rng.normal(size=clean.shape))
        return KSpaceSlice(kspace=noisy, reference=reference, mask=mask, noise_var=sigma**2, name=name)
    from adaptcs.mri.coils import ring_correlation, simulated_sensitivities

    fine_maps = simulated_sensitivities(coils, (FINE, FINE))
    clean = np.stack([to_kspace(image * s)[lo_y:lo_y + ny, lo_x:lo_x + nx] * (np.sqrt(ny * nx) / FINE)
                      for s in fine_maps])  # (coils, ny, nx)
    correlation = ring_correlation(coils, coil_correlation)
    white = np.sqrt(0.5) * (rng.normal(size=clean.shape) + 1j * rng.normal(size=clean.shape))
    noisy = clean + sigma * np.tensordot(np.linalg.cholesky(correlation), white, axes=(1, 0))
    covariance = sigma**2 * correlation
    return KSpaceSlice(kspace=noisy, reference=reference, mask=mask, noise_var=sigma**2, name=name,
                       sensitivities=simulated_sensitivities(coils, (ny, nx)), noise_covariance=covariance)


def colin27_kspace(n=256, *, which: str = "test", noise: float = 0.02, seed: int = 0,
                   phase: str = "spin_echo", coils: int | None = None) -> list[KSpaceSlice]:
    """Every slice of the test (or training) set as a simulated acquisition (:func:`simulate`, phase regime
    ``phase``, ``coils`` receive coils or one); slice i is seeded by ``seed * 1000 + i``."""
    slices, zs = colin27_slices(which)
    return [simulate(s, n, noise=noise, seed=seed * 1000 + i, name=f"colin27-z{z}", phase=phase, coils=coils)
            for i, (s, z) in enumerate(zip(slices, zs, strict=True))]
