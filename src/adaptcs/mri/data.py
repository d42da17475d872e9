"""Simulated single-coil k-space from a recorded MRI average: axial slices of the Colin27 T1 (docs/mri.md, "Data").

No raw scanner k-space is used. Each slice (0.5 mm voxels, from Debian's ``mricron-data``; remade by
``scripts/make_colin27_slices.py``, copyright notice in ``adaptcs/data/COLIN27-COPYRIGHT``) is placed in a
256 mm x 256 mm field of view on a 512 x 512 grid, given a smooth random phase, transformed to k-space on that
fine grid and cropped to the central n x n samples (n = 256: 1 mm pixels; n = 128: 2 mm): the image on the
n x n grid is then not a pixel image the reconstruction grid can represent exactly (no "inverse crime").
Complex Gaussian noise is added in k-space at a stated level.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import numpy as np

from adaptcs.mri.lines import to_image, to_kspace

FINE = 512  # fine grid (0.5 mm, a 256 mm field of view)
PHASE_TERMS = 3  # the smooth phase: cosines up to this spatial frequency (cycles per field of view) along each axis
PHASE_SPAN = np.pi  # its peak-to-peak range in radians (at most)


@dataclass(frozen=True)
class KSpaceSlice:
    """One simulated acquisition.

    Attributes
    ----------
    kspace : ndarray of complex, shape (n, n)
        Centred k-space with noise (:func:`adaptcs.mri.lines.to_kspace` convention).
    reference : ndarray of complex, shape (n, n)
        The image without noise (the inverse transform of the noise-free cropped k-space): what a reconstruction is
        compared with.
    mask : ndarray of bool, shape (n, n)
        The brain (where errors are measured).
    noise_var : float
        Variance of the complex noise per k-space sample.
    name : str
    """

    kspace: np.ndarray
    reference: np.ndarray
    mask: np.ndarray
    noise_var: float
    name: str


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


def simulate(slice_u8: np.ndarray, n, *, noise: float, seed: int, name: str = "") -> KSpaceSlice:
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
    """
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
    image = fine * np.exp(1j * smooth_phase(fine.shape, rng))
    lo_y, lo_x = (FINE - ny) // 2, (FINE - nx) // 2
    # cropping the centred unitary k-space from FINE^2 to ny nx samples scales the image by FINE / sqrt(ny nx)
    clean = to_kspace(image)[lo_y:lo_y + ny, lo_x:lo_x + nx] * (np.sqrt(ny * nx) / FINE)
    reference = to_image(clean)
    brain = np.zeros((FINE, FINE), bool)
    brain[top:top + h, left:left + w] = slice_u8 > 0
    if FINE % ny == 0 and FINE % nx == 0:  # pixels that are more than half brain
        mask = brain.reshape(ny, FINE // ny, nx, FINE // nx).mean(axis=(1, 3)) > 0.5
    else:  # the brain at every pixel's centre on the fine grid
        centres_y = ((np.arange(ny) + 0.5) * FINE / ny).astype(np.intp)
        centres_x = ((np.arange(nx) + 0.5) * FINE / nx).astype(np.intp)
        mask = brain[np.ix_(centres_y, centres_x)]
    sigma = noise * float(np.percentile(np.abs(reference[mask]), 99))
    noisy = clean + sigma * np.sqrt(0.5) * (rng.normal(size=clean.shape) + 1j * rng.normal(size=clean.shape))
    return KSpaceSlice(kspace=noisy, reference=reference, mask=mask, noise_var=sigma**2, name=name)


def colin27_kspace(n=256, *, which: str = "test", noise: float = 0.02, seed: int = 0) -> list[KSpaceSlice]:
    """Every slice of the test (or training) set as a simulated acquisition (:func:`simulate`); slice i is seeded by
    ``seed * 1000 + i``."""
    slices, zs = colin27_slices(which)
    return [simulate(s, n, noise=noise, seed=seed * 1000 + i, name=f"colin27-z{z}")
            for i, (s, z) in enumerate(zip(slices, zs, strict=True))]
