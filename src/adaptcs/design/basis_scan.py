"""Scans: complete recordings of an instrument's candidates (basis images of a single-pixel camera, its
Walsh-Hadamard patterns, any :class:`adaptcs.operators.MeasurementOperator`), replayed in the order each strategy
would have measured them.

An instrument that measured every candidate (or a subset) gives one value per candidate. :func:`replay_recording`
re-runs an acquisition on those values (the candidate loop, :class:`adaptcs.design.CandidateDesigner`, fed from the
recording in batches): each order chooses only among the candidates that were measured, the
estimator is refitted after every batch (``topdown`` and ``random`` choose without it, so they fit only where a
reconstruction is kept), and the reconstructions at the fractions asked are kept. :func:`replay_basis_scan` is the
case of basis images: rows are basis vectors in coefficient space, so the estimator sees a selection (for GSS-EP
and SS-EP the diagonal posterior: O(d) per sweep) and designed rows are the unmeasured coefficients of largest
posterior variance (``x^T V x`` of a basis row is ``V_jj``): the basis is pooled implicitly, no candidate matrix.

Orders: ``design`` (largest information gain; for basis images, largest posterior variance), ``topdown`` (the
operator's coarse-to-fine order; coefficient order for a basis), ``predict`` (the wavelet prediction scan,
:mod:`adaptcs.design.prediction`; wavelet basis images only) and ``random``. Every order measures the operator's
coarsest candidates first (a wavelet's approximation subband: nothing else is sensible before it, and all share it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from adaptcs import _validation as val
from adaptcs.bases.images import Basis
from adaptcs.bases.prediction import check_prediction_basis
from adaptcs.design.candidates import ORDERS, CandidateDesigner
from adaptcs.operators import BasisSelection, MeasurementOperator, PatternOperator

REPLAY_ORDERS = ORDERS


@dataclass
class ScanReplay:
    """One order replayed on a basis scan.

    Attributes
    ----------
    order : str
    n : ndarray of int, shape (k,)
        Coefficients measured at each kept reconstruction (the fractions asked, times d, rounded down).
    coef : ndarray, shape (k, d)
        The estimator's coefficients there.
    measured : ndarray of int, shape (n[-1],)
        The coefficients in the order they were measured.
    converged : ndarray of int8, shape (k,)
        1 converged, 0 not, -1 the estimator reports nothing.
    noise_var : ndarray, shape (k,)
        The estimator's noise variance there (NaN if it has none).
    seconds : float
        CPU time of the whole replay (fits and choices).
    n_iter : ndarray of int, shape (k,)
        The estimator's iterations in the fit there (-1 if it reports none).
    cpu_seconds : ndarray, shape (k,)
        CPU time from the start of the replay to each kept reconstruction (cumulative).
    residual : ndarray, shape (k,)
        The estimator's ``fixed_point_residual_`` there (NaN if it reports none).
    group_prob : ndarray of shape (G,) or None
        The last fit's group probabilities, for estimators that have them.
    """

    order: str
    n: np.ndarray
    coef: np.ndarray
    measured: np.ndarray
    converged: np.ndarray
    noise_var: np.ndarray
    seconds: float
    n_iter: np.ndarray
    cpu_seconds: np.ndarray
    residual: np.ndarray
    group_prob: np.ndarray | None = None


def replay_basis_scan(estimator, basis: Basis, values, order: str, fractions, *, batch_size: int | None = None,
                      rng=None) -> ScanReplay:
    """Replay the acquisition ``order`` on the values of a basis scan: :func:`replay_recording` with the basis's images
    (:class:`adaptcs.operators.BasisSelection`).

    Parameters
    ----------
    estimator : scikit-learn style estimator
        Fitted on the coefficients (cloned; refits use ``warm_start=True`` when it has that parameter).
        "design" needs ``coef_var_`` (the posterior marginal variances).
    basis : Basis
        The basis the scan measured ("predict": a wavelet basis).
    values : array-like, shape (d,)
        The measured value of every basis image of unit norm (``c_j`` plus noise); NaN for basis images that were
        not measured (no order can choose them).
    order : {"design", "topdown", "predict", "random"}
    fractions : sequence of float in (0, 1]
        Fractions of the d coefficients at which to keep the reconstruction (at most the measured fraction).
    batch_size : int, optional
        Coefficients added per refit; default ``max(1, d // 256)`` (E7's step).
    rng : None, int or numpy.random.Generator
        The "random" order.

    Returns
    -------
    ScanReplay
    """
    return replay_recording(estimator, BasisSelection(basis), values, order, fractions, batch_size=batch_size, rng=rng)


def replay_recording(estimator, operator: MeasurementOperator, recording, order: str, fractions, *,
                     batch_size: int | None = None, rng=None) -> ScanReplay:
    """Replay the acquisition ``order`` on a complete recording of an operator's candidates.

    Parameters
    ----------
    estimator : scikit-learn style estimator
        Fitted on the operator's rows (cloned; refits use ``warm_start=True`` when it has that parameter).
        "design" needs what the operator's :meth:`~adaptcs.operators.MeasurementOperator.gains` needs
        (``coef_var_`` for basis images, ``cov_matvec`` for patterns).
    operator : :class:`adaptcs.operators.MeasurementOperator`
        What was measured: basis images, Walsh-Hadamard patterns, rows of a pool, ...
    recording : array-like, shape (n_candidates, ...)
        The operator's complete recording (:meth:`~adaptcs.operators.MeasurementOperator.record` layout), NaN for
        candidates that were not measured (no order can choose them).
    order : {"design", "topdown", "predict", "random"}
        "design": the unmeasured candidates of largest information gain; "topdown": the operator's
        coarse-to-fine order; "predict": the wavelet prediction scan (basis images of a wavelet only); "random".
        Every order measures the operator's ``n_first`` coarsest candidates first.
    fractions : sequence of float in (0, 1]
        Fractions of the candidates at which to keep the reconstruction (at most the measured fraction).
    batch_size : int, optional
        Candidates added per refit; default ``max(1, n_candidates // 256)``.
    rng : None, int or numpy.random.Generator
        The "random" order, and the order that breaks ties in "design".

    Returns
    -------
    ScanReplay
    """
    if order not in REPLAY_ORDERS:
        raise ValueError(f"order must be one of {REPLAY_ORDERS}; got {order!r}")
    m = operator.n_candidates
    recording = np.asarray(recording)
    if recording.shape[:1] != (m,):
        raise ValueError(f"values must have one entry per candidate, shape ({m}, ...); got {recording.shape}")
    if np.isinf(recording).any():
        raise ValueError("values must be finite (NaN marks a candidate that was not measured)")
    available = ~np.isnan(recording.reshape(m, -1)).any(axis=1)
    checkpoints = _checkpoints(fractions, m, int(available.sum()))
    batch_size = max(1, m // 256) if batch_size is None else val.check_count(batch_size, "batch_size")
    if order == "predict":
        if not isinstance(operator, BasisSelection):
            raise ValueError(f"order='predict' scans wavelet basis images; {type(operator).__name__} has none")
        check_prediction_basis(operator.basis)
    # An estimator that learns by many cheap iterations may track its hyper-parameters instead: every refit takes
    # a few iterations from where the last one stopped, and a checkpoint's reconstruction is a separate fit to
    # convergence from there, so the order (and every later checkpoint) does not depend on where checkpoints are.
    designer = CandidateDesigner(estimator, operator, order=order, available=available, ties="random", rng=rng)
    started = time.process_time()
    kept = {"n": [], "coef": [], "converged": [], "noise_var": [], "n_iter": [], "residual": [], "cpu_seconds": []}
    while designer.n_told_ < checkpoints[-1]:
        target = min(c for c in checkpoints if c > designer.n_told_)
        new, _ = designer.ask(min(batch_size, target - designer.n_told_))
        designer.tell(new, operator.read(recording, new))
        if designer.n_told_ in checkpoints:
            recorded = designer.converge()
            flag = getattr(recorded, "converged_", None)
            kept["n"].append(designer.n_told_)
            kept["coef"].append(np.asarray(recorded.coef_, dtype=float).copy())
            kept["converged"].append(-1 if flag is None else int(bool(flag)))
            kept["noise_var"].append(float(getattr(recorded, "noise_var_", np.nan)))
            kept["n_iter"].append(int(getattr(recorded, "n_iter_", -1)))
            kept["residual"].append(float(getattr(recorded, "fixed_point_residual_", np.nan)))
            kept["cpu_seconds"].append(time.process_time() - started)
    group_prob = getattr(designer.model_, "group_prob_", None)
    return ScanReplay(order=order, n=np.asarray(kept["n"], dtype=np.int64), coef=np.asarray(kept["coef"]),
                      measured=np.asarray(designer.chosen_, dtype=np.int64),
                      converged=np.asarray(kept["converged"], dtype=np.int8),
                      noise_var=np.asarray(kept["noise_var"]), seconds=time.process_time() - started,
                      n_iter=np.asarray(kept["n_iter"], dtype=np.int64),
                      cpu_seconds=np.asarray(kept["cpu_seconds"]), residual=np.asarray(kept["residual"], dtype=float),
                      group_prob=None if group_prob is None else np.asarray(group_prob, dtype=float).copy())


def _checkpoints(fractions, d: int, n_available: int) -> list[int]:
    """The counts of candidates at the fractions asked (at least 1 each), sorted; ValueError if more are asked for
    than were measured."""
    fractions = np.atleast_1d(np.asarray(fractions, dtype=float))
    if fractions.size == 0 or np.any(~(fractions > 0)) or np.any(fractions > 1):
        raise ValueError(f"fractions must be in (0, 1]; got {fractions.tolist()}")
    counts = sorted({max(1, int(f * d)) for f in fractions})
    if counts[-1] > n_available:
        raise ValueError(f"a fraction {counts[-1] / d:.3g} of the coefficients is asked for; only {n_available} of "
                         f"{d} were measured")
    return counts


def photon_basis_scan(basis: Basis, image, photons: float, rng=None) -> np.ndarray:
    """:func:`photon_scan` of the images of ``basis`` (:class:`adaptcs.operators.BasisSelection`): one value per
    basis image, shape (d,), in the basis's coefficient order."""
    return photon_scan(BasisSelection(basis), image, photons, rng)


def photon_scan(operator: PatternOperator, image, photons: float, rng=None) -> np.ndarray:
    """Simulate a single-pixel camera showing every pattern of ``operator`` with photon (Poisson) noise.

    A pattern with negative entries is shown as its positive and its negative part (two exposures), and each
    exposure counts photons: ``n_pm ~ Poisson(photons * a_pm . x)``. The value of pattern ``a`` is
    ``(n_+ - n_-) / photons``: unbiased for ``a . x``, with variance ``(a_+ . x + a_- . x) / photons`` (patterns
    that cover more pixels are noisier).

    Parameters
    ----------
    operator : :class:`adaptcs.operators.PatternOperator`
    image : array-like, shape (n_samples,)
        Intensities (non-negative), flattened.
    photons : float
        Expected photon count per unit of ``a_pm . x``.
    rng : None, int or numpy.random.Generator

    Returns
    -------
    ndarray, shape (n_candidates,)
        One value per pattern, in the operator's candidate order.
    """
    image = np.asarray(image, dtype=float)
    if image.shape != (operator.n_coef,) or np.any(image < 0) or not np.all(np.isfinite(image)):
        raise ValueError(f"image must be {operator.n_coef} finite non-negative intensities; got shape {image.shape}")
    photons = val.check_positive_scalar(photons, "photons")
    rng = val.check_random_generator(rng)
    values = np.empty(operator.n_candidates)
    for start in range(0, operator.n_candidates, 512):  # patterns in blocks: never all of them at once
        stop = min(start + 512, operator.n_candidates)
        patterns = operator.patterns(np.arange(start, stop))
        positive, negative = np.maximum(patterns, 0.0) @ image, np.maximum(-patterns, 0.0) @ image
        values[start:stop] = (rng.poisson(photons * positive) - rng.poisson(photons * negative)) / photons
    return values
