"""Replay a complete basis scan an instrument made: which acquisition order would have needed fewest patterns?

The user gives what a single-pixel camera measured for every image of a basis (or a subset): one value per basis
image, or the patterns shown and their values. :func:`replay_scan` replays each order on those values
(:func:`adaptcs.design.basis_scan.replay_basis_scan`: each order chooses only among the measured patterns) and
scores each reconstruction against the full-scan image (all measured values, synthesised) by PSNR and relative
error. Command line: ``python -m adaptcs replay``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from adaptcs.bases.images import make_basis
from adaptcs.bases.prediction import single_coefficient_rows
from adaptcs.design.basis_scan import REPLAY_ORDERS, replay_basis_scan
from adaptcs.readers import read_rows, read_vector

PRIORS = ("tree", "prediction", "scales")
NOISE_MODELS = ("constant", "photon")


MAX_MAGNITUDE = 1e150  # values and pattern gains beyond this (or gains below its inverse) overflow when squared
PATTERN_RTOL = 1e-4  # a row is one basis image if its other coefficients are below this fraction of its largest
ROWS_PER_BLOCK = 256  # patterns transformed at a time when a scan's rows are checked


def scan_values(basis, values, rows=None) -> np.ndarray:
    """One value per basis image of unit norm (NaN where not measured), in the basis's coefficient order.

    Parameters
    ----------
    basis : Basis
    values : ndarray, shape (d,) or (n,)
        Without ``rows``: the value of each basis image in coefficient order. With ``rows``: the value of each row.
    rows : ndarray, shape (n, d), optional
        The patterns shown (pixels, row-major), each a multiple of one basis image; a value is divided by its
        pattern's gain (``row = g Psi^T e_j`` measures ``g c_j``). A basis image shown twice is averaged.
    """
    values = np.asarray(values, dtype=float)
    _check_magnitudes(values)
    if rows is None:
        if values.shape != (basis.d,):
            raise ValueError(f"a {basis.name} scan of {basis.side} x {basis.side} images has {basis.d} values (one per "
                             f"basis image, NaN where not measured); got {values.shape[0]}")
        return values
    rows = np.asarray(rows, dtype=float)
    if rows.ndim != 2 or rows.shape[1] != basis.d or rows.shape[0] != values.shape[0]:
        raise ValueError(f"rows must have shape (n, {basis.d}) with one value each; got rows {rows.shape}, "
                         f"values {values.shape}")
    single, columns, gains = _single_basis_images(basis, rows)
    if not single.all():
        bad = np.flatnonzero(~single).tolist()
        raise ValueError(f"rows {bad[:5]} are not multiples of one {basis.name} basis image: a replay needs a basis "
                         "scan")
    odd = np.flatnonzero(~((np.abs(gains) > 1 / MAX_MAGNITUDE) & (np.abs(gains) < MAX_MAGNITUDE)))
    if odd.size:
        raise ValueError(f"rows {odd[:5].tolist()} are basis images scaled by {gains[odd[0]]:.3g}: outside "
                         f"{1 / MAX_MAGNITUDE:.0e}..{MAX_MAGNITUDE:.0e} their squares overflow or vanish; rescale the "
                         "patterns")
    out = np.full(basis.d, np.nan)
    total = np.bincount(columns, gains * values, minlength=basis.d)
    weight = np.bincount(columns, gains * gains, minlength=basis.d)
    measured = weight > 0
    out[measured] = total[measured] / weight[measured]  # least squares for repeats: sum g y / sum g^2
    return out


def _single_basis_images(basis, rows: np.ndarray, block: int = ROWS_PER_BLOCK):
    """For each row: whether it is a multiple of one basis image, which, and the multiple (its gain). Rows are
    transformed a block at a time, so memory beyond the rows themselves stays small (a 64 x 64 camera's 4,096
    patterns: 134 MB of rows, not four times that)."""
    n = rows.shape[0]
    single, columns, gains = np.empty(n, dtype=bool), np.empty(n, dtype=np.intp), np.empty(n)
    for start in range(0, n, block):
        coefficients = basis.row_coefficients(rows[start:start + block])
        # patterns exported with 6 significant digits leak about 1e-6 of their peak into other basis images
        part = slice(start, start + coefficients.shape[0])
        single[part], columns[part] = single_coefficient_rows(coefficients, rtol=PATTERN_RTOL)
        gains[part] = coefficients[np.arange(coefficients.shape[0]), columns[part]]
    return single, columns, gains


def _check_magnitudes(values: np.ndarray) -> None:
    """ValueError for values whose squares overflow, or a scan whose measured values are all zero."""
    measured = values[np.isfinite(values)]
    if measured.size and np.max(np.abs(measured)) >= MAX_MAGNITUDE:
        raise ValueError(f"the scan's values reach {np.max(np.abs(measured)):.3g}: beyond {MAX_MAGNITUDE:.0e} their "
                         "squares overflow; rescale them (a replay does not depend on the units)")
    if measured.size and not np.any(measured):
        raise ValueError("every measured value of the scan is 0: there is nothing to reconstruct")


def make_estimator(prior: str, basis, values: np.ndarray, noise: str = "constant", photons: float | None = None):
    """The estimator a replay reconstructs with: "tree" (:class:`WaveletTreeSpikeSlab`, everything learned),
    "prediction" (the same tree whose "on" state follows the wavelet prediction of each detail, exact spike,
    everything learned) or "scales" (GSS-EP with a prior per scale, learned). ``noise``: one noise variance for
    every pattern ("constant") or a photon-counting camera's, proportional to the light each pattern collects
    ("photon"; the tree priors only); ``photons``: with "photon", the camera's known photon count per unit
    intensity, which then gives the noise instead of learning it."""
    if noise not in NOISE_MODELS:
        raise ValueError(f"noise must be one of {NOISE_MODELS}; got {noise!r}")
    if prior in ("tree", "prediction"):
        from adaptcs.models.wavelet_tree import WaveletTreeSpikeSlab

        if prior == "prediction":
            return WaveletTreeSpikeSlab(basis, prediction=True, noise=noise, photons=photons)
        return WaveletTreeSpikeSlab(basis, learn=("p_on", "p_off", "v0", "v_small", "noise_var"), noise=noise,
                                    photons=photons)
    if noise != "constant":
        raise ValueError("noise='photon' is a model of the tree priors ('tree', 'prediction'); 'scales' has one "
                         "noise variance")
    if prior == "scales":
        from adaptcs.models import GroupSpikeSlabEP
        from adaptcs.models._ep import LEARNABLE

        level = float(np.nanmean(values**2))
        return GroupSpikeSlabEP(basis.groups(), scales=basis.scales(), p0=0.5, v0=level, noise_var=1e-2 * level,
                                learn=LEARNABLE)
    raise ValueError(f"prior must be one of {PRIORS}; got {prior!r}")


def replay_scan(basis, values, orders=REPLAY_ORDERS, fractions=(0.10, 0.15, 0.25), prior: str = "prediction",
                batch_size: int | None = None, seed: int = 0, noise: str = "constant",
                photons: float | None = None) -> tuple[pd.DataFrame, dict]:
    """Replay every order on a scan and score it against the full-scan image.

    Parameters
    ----------
    basis : Basis
    values : ndarray, shape (d,)
        :func:`scan_values`' output.
    orders : sequence of str
        Among :data:`adaptcs.design.basis_scan.REPLAY_ORDERS`.
    fractions : sequence of float
        Fractions of the d basis images at which to score.
    prior : {"prediction", "tree", "scales"}
        :func:`make_estimator`; "prediction" (the default) measured best on 18 simulated scans
        (docs/log/results.md, "Basis scans").
    batch_size : int, optional
        Patterns per refit (default d/256).
    seed : int
        The random order.
    noise : {"constant", "photon"}
        The noise model (:func:`make_estimator`).
    photons : float, optional
        With ``noise="photon"``: the camera's photon count per unit intensity, known (default: the noise is
        learned).

    Returns
    -------
    table : pandas.DataFrame
        One row per (order, fraction): ``fraction`` (``n / d``), ``n``, ``psnr`` (dB, peak = the full-scan image's
        range), ``relative_error``, ``converged``, ``noise_var``, ``cpu_seconds`` (of the whole replay of that
        order).
    images : dict
        ``"full"``: the full-scan image (d,); ``(order, n)``: each reconstruction (d,).
    """
    values = np.asarray(values, dtype=float)
    unknown = [o for o in orders if o not in REPLAY_ORDERS]
    if unknown or not orders:
        raise ValueError(f"orders must be among {REPLAY_ORDERS}; got {list(orders)}")
    full = basis.synthesize(np.nan_to_num(values, nan=0.0))
    peak = float(full.max() - full.min()) or 1.0
    records, images = [], {"full": full}
    for order in orders:
        estimator = make_estimator(prior, basis, values, noise, photons)
        replay = replay_basis_scan(estimator, basis, values, order, fractions, batch_size=batch_size, rng=seed)
        for n, coef, converged, noise_var in zip(replay.n, replay.coef, replay.converged, replay.noise_var,
                                                     strict=True):
            image = basis.synthesize(coef)
            images[order, int(n)] = image
            records.append({"order": order, "fraction": n / basis.d, "n": int(n),
                            "psnr": float(10 * np.log10(peak**2 / np.mean((image - full) ** 2))),
                            "relative_error": float(np.linalg.norm(image - full) / np.linalg.norm(full)),
                            "converged": int(converged), "noise_var": float(noise_var), "cpu_seconds": replay.seconds})
    return pd.DataFrame.from_records(records), images


def load_scan(basis_name: str, side: int, values_path, rows_path=None, level: int | None = None):
    """The basis and the per-basis-image values of a scan on disk (see :func:`scan_values`).

    ``level`` is the wavelet depth of the scan (default: a 4 x 4 approximation). With ``rows`` and no ``level``,
    the depth is the one at which every row is a multiple of one basis image (ValueError naming the depths that
    fit when that is not one).
    """
    values = read_vector(values_path)
    rows = None if rows_path is None else read_rows(rows_path)
    try:
        if level is not None or rows is None or basis_name == "dct":
            basis = make_basis(basis_name, side, level)
            return basis, scan_values(basis, values, rows)
        return infer_level(basis_name, side, values, rows)
    except ValueError as exc:  # say which files
        raise ValueError(f"{values_path}" + ("" if rows_path is None else f" with {rows_path}") + f": {exc}") from None


def infer_level(basis_name: str, side: int, values, rows):
    """The basis of the depth at which every row is one basis image, and the scan's values in it.

    Tries the default depth first, then every other; ValueError if none fits, or if several fit and the default
    is not among them (then ``level`` must be given)."""
    default = make_basis(basis_name, side)
    try:
        return default, scan_values(default, values, rows)
    except ValueError as exc:
        if "not multiples" not in str(exc):
            raise
    fits = {}
    for level in range(1, int(np.log2(side)) + 1):
        if level == default.level:
            continue
        basis = make_basis(basis_name, side, level)
        try:
            fits[level] = (basis, scan_values(basis, values, rows))
        except ValueError:
            continue
    if len(fits) == 1:
        return next(iter(fits.values()))
    if not fits:
        raise ValueError(f"the rows are not basis images of a {basis_name} basis of {side} x {side} images at any "
                         f"depth 1..{int(np.log2(side))}: a replay needs a basis scan")
    raise ValueError(f"the rows are basis images of the {basis_name} basis at depths {sorted(fits)}; give the "
                     "scan's depth (--level, data.level)")
