"""Retrospective line design on a fully sampled k-space: design and fixed masks at the same line counts, each
reconstructed by the same line model and scored against the fully sampled image (docs/mri.md, "Command line").
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

import numpy as np

from adaptcs._names import MRI_ORDERS as ORDERS
from adaptcs.bases.separable import SeparableWavelet, to_image
from adaptcs.metrics import magnitude_scores
from adaptcs.models.line_coils import CoilPhaseLineGaussian
from adaptcs.models.line_phase import PhaseLineGaussian, magnitude_profile
from adaptcs.models.line_phase_sparse import PhaseLineSpikeSlab
from adaptcs.models.line_spike_slab import LineSpikeSlab, pair_profile
from adaptcs.mri.coils import least_squares_image
from adaptcs.mri.data import colin27_kspace
from adaptcs.mri.design import design_lines, fixed_mask
from adaptcs.mri.noise import noise_from_readout_edges
from adaptcs.operators import CoilKSpaceLines, KSpaceLines

log = logging.getLogger(__name__)
PRIORS = ("gaussian", "sparse", "phase", "phase_sparse")  # the phase model's phase-blind end; spike and slab; the
# phase model; spike and slab on the phase model's phase-corrected image
PROFILES = ("colin27", "flat")


@dataclass
class ReplayResult:
    """What :func:`replay` measured.

    Attributes
    ----------
    rows : list of dict
        One per (order, lines): order, lines, relative_error, psnr, converged, columns_not_converged, cpu_seconds.
    design_lines : ndarray of int
        The designed lines in the order chosen.
    images : dict of (str, int) -> ndarray
        Reconstructions by order and line count (complex, (ny, nx)).
    masks : dict of (str, int) -> ndarray of int
        The lines of every order and count.
    noise_var : float
    noise_source : str
    """

    rows: list = field(default_factory=list)
    design_lines: np.ndarray | None = None
    images: dict = field(default_factory=dict)
    masks: dict = field(default_factory=dict)
    noise_var: float = float("nan")
    noise_source: str = ""


def coil_combined(kspace: np.ndarray, sensitivities: np.ndarray) -> np.ndarray:
    """The least-squares image of every coil's full k-space (coils, ny, nx), ``sum_c conj(s_c) x_c / sum_c |s_c|^2``
    (SENSE with every line; 0 where no coil sees the pixel), shape (ny, nx)."""
    return least_squares_image(np.array([to_image(k) for k in kspace]), sensitivities)


def default_profile(basis: SeparableWavelet) -> np.ndarray:
    """:func:`pair_profile` of the Colin27 training slices simulated at the basis's size (no test slice); computed
    once per size and wavelet."""
    return _colin27_profile(basis.shape, basis.wavelet, basis.level).copy()


@functools.lru_cache(maxsize=8)
def _colin27_profile(shape: tuple, wavelet: str, level: int) -> np.ndarray:
    basis = SeparableWavelet(shape, wavelet, level)
    try:
        references = [a.reference for a in colin27_kspace(basis.shape, which="train")]
    except ValueError as exc:
        raise ValueError(f"no Colin27 profile at size {basis.shape} ({exc}); use profile='flat'") from None
    return pair_profile(basis, references)


def colin27_magnitude_profile(basis: SeparableWavelet) -> np.ndarray:
    """:func:`adaptcs.models.line_phase.magnitude_profile` of the Colin27 training slices at the basis's size (no test
    slice); computed once per size and wavelet."""
    return _colin27_magnitude_profile(basis.shape, basis.wavelet, basis.level).copy()


@functools.lru_cache(maxsize=8)
def _colin27_magnitude_profile(shape: tuple, wavelet: str, level: int) -> np.ndarray:
    return magnitude_profile(wavelet, level, [np.abs(a.reference) for a in colin27_kspace(shape, which="train")])


def line_model(basis: SeparableWavelet, noise_var: float, prior: str = "gaussian", profile: str = "colin27",
               sensitivities=None):
    """The line model the command line, the replay and the lab fit.

    ``prior`` "phase" and "gaussian" are one model, :class:`adaptcs.models.line_phase.PhaseLineGaussian` (exact,
    always at its fixed point): "phase" estimates the image's phase from the centre lines and trusts it per column
    as far as the other lines agree (the design then skips lines the conjugate side tells where the phase is
    known); "gaussian" is its phase-blind end (``eps=1``: a circular prior, so the design is fixed by the centre
    lines). "sparse" is the spike-and-slab model on lines (:class:`adaptcs.models.line_spike_slab.LineSpikeSlab`,
    p0 and v0 learned per pair of scales: adaptive, but EP often stops short). "phase_sparse" is spike-and-slab on
    the phase model's phase-corrected image (:class:`adaptcs.models.line_phase_sparse.PhaseLineSpikeSlab`, p0 = 0.5
    given, v0 learned: adaptive; on simulated Colin27 slices it reconstructs below the Gaussian phase model,
    docs/mri.md). Slab variances per y-scale (per pair of scales for "sparse") from the Colin27 training slices
    (``profile="colin27"``) or all equal ("flat"). With ``sensitivities`` (coils, ny, nx) the model of a receive
    array, :class:`adaptcs.models.line_coils.CoilPhaseLineGaussian` ("phase" or "gaussian" only)."""
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {PRIORS}; got {prior!r}")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}; got {profile!r}")
    if sensitivities is not None:
        if prior not in ("phase", "gaussian"):
            raise ValueError(f"the coil line model takes prior phase or gaussian (a sparse coil model is not done); "
                             f"got {prior!r}")
        shape = colin27_magnitude_profile(basis) if profile == "colin27" else None
        return CoilPhaseLineGaussian(basis, sensitivities=sensitivities, noise_var=noise_var, profile=shape,
                                     eps=1.0 if prior == "gaussian" else None)
    if prior in ("phase", "gaussian", "phase_sparse"):
        shape = colin27_magnitude_profile(basis) if profile == "colin27" else None
        if prior == "phase_sparse":
            return PhaseLineSpikeSlab(basis, noise_var=noise_var, profile=shape, p0=0.5, learn=("v0",))
        return PhaseLineGaussian(basis, noise_var=noise_var, profile=shape, eps=1.0 if prior == "gaussian" else None)
    shape = default_profile(basis) if profile == "colin27" else None
    return LineSpikeSlab(basis, noise_var=noise_var, p0=0.1, learn=("p0", "v0"), profile=shape)


def replay(kspace: np.ndarray, *, counts, start: int, orders=ORDERS, noise_var: float | None = None,
           wavelet: str = "db4", level: int = 4, prior: str = "gaussian", profile: str = "colin27",
           seed: int = 0, progress=None, sensitivities=None) -> ReplayResult:
    """Design lines on a fully sampled centred k-space and score every order against its full image.

    Parameters
    ----------
    kspace : ndarray of complex, shape (ny, nx), or (coils, ny, nx) with ``sensitivities``
        Fully sampled, centred (:func:`adaptcs.bases.separable.to_kspace` convention), phase encodes along axis -2;
        a receive array's coils prewhitened (white noise of variance ``noise_var`` in every coil).
    counts : iterable of int
        Line counts at which every order is scored (the design runs to the largest).
    start : int
        Centre lines every order starts with.
    orders : iterable of str
        Of :data:`ORDERS`.
    noise_var : float, optional
        Noise variance per complex sample (a noise scan); default: :func:`noise_from_readout_edges` of the start
        lines.
    wavelet, level : the separable wavelet (:class:`SeparableWavelet`).
    prior : {"gaussian", "sparse", "phase"}
        phase: :class:`adaptcs.models.line_phase.PhaseLineGaussian` (the phase's trust learned per column);
        gaussian: its phase-blind end (``eps=1``); sparse: the spike-and-slab line model, p0 and v0 learned per pair
        of scales (adaptive, but EP often stops short) (:func:`line_model`).
    profile : {"colin27", "flat"}
        Slab variances per y-scale (per pair of scales for "sparse") in the proportions of the Colin27 training
        slices, or all equal.
    seed : int
        Seeds the random masks (a local Generator).
    progress : callable, optional
        ``progress(lines_so_far, design_budget)`` after every designed line (a progress bar); default: a log line
        at DEBUG level.
    sensitivities : ndarray of complex, shape (coils, ny, nx), optional
        A receive array's sensitivities (prewhitened with ``kspace``): every order is fitted by the coil line model
        (:func:`line_model`) on every coil's lines and scored against the coil-combined full image
        ``sum_c conj(s_c) x_c / sum_c |s_c|^2`` (0 where no coil sees the pixel).
    """
    kspace = np.asarray(kspace)
    ndim = 2 if sensitivities is None else 3
    if kspace.ndim != ndim or not np.iscomplexobj(kspace) or not np.all(np.isfinite(kspace)):
        layout = "(ny, nx)" if sensitivities is None else "(coils, ny, nx)"
        raise ValueError(f"kspace must be a finite complex array of shape {layout}; got dtype {kspace.dtype}, shape "
                         f"{kspace.shape}")
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {PRIORS}; got {prior!r}")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}; got {profile!r}")
    unknown = set(orders) - set(ORDERS)
    if unknown:
        raise ValueError(f"unknown orders {sorted(unknown)}; choose from {ORDERS}")
    ny = kspace.shape[-2]
    counts = sorted({int(c) for c in counts})
    if not counts or counts[0] < start or counts[-1] > ny or start < 1:
        raise ValueError(f"line counts must lie in {start}..{ny} (start {start}); got {counts}")
    basis = SeparableWavelet(kspace.shape[-2:], wavelet, level)
    out = ReplayResult()
    if sensitivities is None:
        operator = KSpaceLines(basis, n_first=start)
        reference = to_image(kspace)
    else:
        operator = CoilKSpaceLines(basis, sensitivities, n_first=start)
        reference = coil_combined(kspace, operator.sensitivities)
        if noise_var is None:
            raise ValueError("give the noise variance of the prewhitened coils (1 after prewhitening)")
    first = np.sort(operator.first())
    if noise_var is None:
        out.noise_var, out.noise_source = noise_from_readout_edges(kspace[first]), "readout edges of the start lines"
    else:
        out.noise_var, out.noise_source = float(noise_var), "given"
    # the choices checked (and the profile cached) before any fit
    line_model(basis, out.noise_var, prior, profile, sensitivities)

    def model():
        return line_model(basis, out.noise_var, prior, profile, sensitivities)

    def add(order: str, count: int, lines: np.ndarray, fit) -> None:  # fit: the line model, fitted
        error, psnr = magnitude_scores(fit.image_, reference)
        out.rows.append({"order": order, "lines": count, "relative_error": error, "psnr": psnr,
                         "converged": fit.converged_, "columns_not_converged": fit.columns_not_converged_,
                         "cpu_seconds": fit.cpu_seconds_})
        out.images[order, count], out.masks[order, count] = fit.image_, np.sort(lines)

    if "design" in orders:
        log.info("designing %d lines from %d centre lines", counts[-1], start)
        run = design_lines(kspace, model(), start=first, budget=counts[-1], checkpoints=counts, operator=operator,
                           progress=lambda m, fit: (progress(m, counts[-1]) if progress is not None
                                                    else log.debug("%d lines", m)))
        out.design_lines = run.lines
        for count in counts:
            add("design", count, run.lines[:count], run.fits[count])
    rng = np.random.default_rng(seed)
    for order in (o for o in orders if o != "design"):
        for count in counts:
            lines = fixed_mask(order, ny, count, start, rng)
            add(order, count, lines, model().fit(operator.read(kspace, lines), lines))
    return out
