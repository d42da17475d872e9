"""GSS-EP on Cartesian k-space lines: the exact block-diagonal posterior and the information gain of every line.

The unknowns are the complex coefficients ``C = W_y x W_x^T`` of a separable wavelet (:mod:`adaptcs.bases.separable`),
taken column by column in real form (``[Re c_j; Im c_j]``, 2 ny numbers per column). Every coefficient's real and
imaginary part form one group (the magnitude is sparse, the phase is free). Prior classes: one spike probability
and one slab variance per pair of scales ``(s_y, s_x)``, shared by all columns; the coarsest pair (the
approximation along both axes) is always on (a Gaussian prior). EP runs on :class:`~adaptcs.models._ep.EPProblem`
with :class:`~adaptcs.models._blocks.SharedBlockRows`, so the same code (its fixed-point test, learning by type-II
maximum likelihood summed over the columns) serves dense rows and lines.

Units: k-space values as given; the noise variance ``noise_var`` is per complex sample (``noise_var / 2`` per real
and per imaginary part); the slab variances are those of the complex coefficients' real (and imaginary) parts.
"""

from __future__ import annotations

import time
from numbers import Real

import numpy as np
from scipy.special import expit, logit
from sklearn.utils._param_validation import Interval

from adaptcs.bases.separable import LineScan, SeparableWavelet, real_form, stack_columns, unstack_columns
from adaptcs.models._base import with_blas_limit
from adaptcs.models._blocks import SharedBlockRows
from adaptcs.models._ep import EPProblem, Hyper, warn_not_converged
from adaptcs.models._ep_fallback import stable_ep
from adaptcs.models._line_ep import EP_CONSTRAINTS, fit_lines_ep, fit_outcome
from adaptcs.models._line_gaussian import (
    checked_candidates,
    errors_after_lines,
    gains_of_lines,
    means_after_lines,
)
from adaptcs.models._line_model import LineModel, check_averages
from adaptcs.models._scaling import power_of_two_scale

LEARN = ("p0", "v0")  # the noise variance is estimated from k-space, not learned (docs/mri.md)


class LineSpikeSlab(LineModel):
    """The group spike-and-slab model on Cartesian lines, refitted as lines arrive (a design loop keeps one); a
    :class:`~adaptcs.models._line_model.LineModel`.

    ``fit``, ``line_gains`` and ``errors_after_line`` run with one BLAS thread (the package's rule,
    :mod:`adaptcs.models._base`).

    Parameters
    ----------
    basis : SeparableWavelet
    noise_var : float
        Noise variance per complex k-space sample (> 0); see :func:`adaptcs.mri.noise.noise_from_readout_edges`.
    p0 : float
        Starting (or, with ``learn=()``, given) spike probability of every detail class, in (0, 1).
    v0 : float or None
        Starting or given slab variance of every class (with ``profile``: the factor of the profile, whose mean over
        the coefficients is 1); None: tied to the data's power (docs/learning.md).
    learn : tuple of str
        Any of "p0", "v0" (type-II maximum likelihood summed over the columns).
    tol, max_iter, damping, damping_decay, v_inf_ratio
        EP's settings, as in :class:`adaptcs.models.GroupSpikeSlabEP`.
    profile : ndarray, shape (K,), optional
        Slab variances of the K pairs of scales relative to each other (:func:`pair_profile` of training images):
        then one slab variance ``v0`` scales them all (one value to learn instead of K, and the pairs no line has
        measured yet get their variance from the profile instead of from the start value).
    dense_rows : bool
        Run the same model on the dense rows ``I (x) A`` (O(n^2 d) per iteration): a check of the block-diagonal
        path for small problems, never faster.

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.mri.data import colin27_kspace
    >>> from adaptcs.bases.separable import centre_lines
    >>> from adaptcs.bases.separable import SeparableWavelet
    >>> from adaptcs.models.line_spike_slab import LineSpikeSlab
    >>> acq = colin27_kspace(32)[0]  # a simulated 32 x 32 slice
    >>> lines = centre_lines(32, 8)
    >>> model = LineSpikeSlab(SeparableWavelet((32, 32), "db2", 2), noise_var=acq.noise_var, p0=0.999,
    ...                       learn=("v0",))
    >>> model = model.fit(acq.kspace[lines], lines)
    >>> model.converged_, model.image_.shape
    (True, (32, 32))
    >>> gains = model.line_gains()  # nats, one per phase encode
    >>> bool(np.all(gains[lines] < gains.max()))  # a measured line tells little more than its own noise
    True
    """

    _posterior_attributes = ("_state", "_run")
    _parameter_constraints = {
        "basis": [SeparableWavelet],
        "noise_var": [Interval(Real, 0, None, closed="neither")],
        "p0": [Interval(Real, 0, 1, closed="neither")],
        "v0": [Interval(Real, 0, None, closed="neither"), None],
        "learn": [tuple, list],
        **EP_CONSTRAINTS,
        "profile": ["array-like", None],
    }

    def __init__(self, basis: SeparableWavelet, *, noise_var: float, p0: float = 0.1, v0: float | None = None,
                 learn=LEARN, tol: float = 1e-4, max_iter: int = 1000, damping: float = 0.9,
                 damping_decay: float = 0.99, v_inf_ratio: float = 300.0, profile=None, dense_rows: bool = False):
        if not noise_var > 0.0 or not np.isfinite(noise_var):
            raise ValueError(f"noise_var must be positive and finite; got {noise_var}")
        if not 0.0 < p0 < 1.0:
            raise ValueError(f"p0 must lie in (0, 1); got {p0}")
        unknown = set(learn) - set(LEARN)
        if unknown:
            raise ValueError(f"learn takes {LEARN}; got {sorted(unknown)}")
        self.basis, self.noise_var, self.p0, self.v0 = basis, float(noise_var), float(p0), v0
        self.learn = tuple(name for name in LEARN if name in learn)
        self.tol, self.max_iter = float(tol), int(max_iter)
        self.damping, self.damping_decay, self.v_inf_ratio = float(damping), float(damping_decay), float(v_inf_ratio)
        self.dense_rows = bool(dense_rows)
        ny, nx = basis.shape
        pair = basis.scale_pair()  # (ny, nx)
        # coefficient q * 2ny + i (block q = column q; i < ny real part, else imaginary) is in group q * ny + i mod ny
        group_of = (np.arange(nx)[:, None] * ny + np.arange(ny)[None, :])  # (nx, ny)
        self.coef_group = np.concatenate([group_of, group_of], axis=1).ravel()
        group_pair = pair.T.ravel()  # (nx * ny,), group q * ny + i has pair[i, q]
        self.n_classes = int(pair.max()) + 1
        self.group_class = np.where(group_pair == 0, -1, group_pair - 1)  # class 0 (coarsest pair): always on
        self.coef_slab = group_pair[self.coef_group]
        self.profile = None
        if profile is not None:
            self.profile = np.asarray(profile, dtype=np.float64)
            if self.profile.shape != (self.n_classes,) or not np.all(self.profile > 0.0):
                raise ValueError(f"profile must hold {self.n_classes} positive values (one per pair of scales); got "
                                 f"shape {self.profile.shape}")
            self._slab_profile = self.profile[self.coef_slab]
            self.coef_slab = np.zeros_like(self.coef_slab)
        self._scale = None
        self._state = None  # (sites, hyper, refits) of the last fit, unit-size
        self.scan_ = None
        self._run = None

    @with_blas_limit
    def fit(self, kspace_lines: np.ndarray, lines, *, warm: bool = False, averages=None) -> LineSpikeSlab:
        """Fit on the measured lines (from scratch, or from the last fit's sites and values with ``warm``).

        Parameters
        ----------
        kspace_lines : ndarray of complex, shape (m, nx)
            The measured lines, in the order of ``lines``.
        lines : array-like of int, shape (m,)
            Their rows in the centred k-space.
        warm : bool
            Start from the last fit (a design loop's refit after new lines): EP's adaptive schedule and tracked
            values; not strict (a refit that only chooses the next line may stop short and is flagged). A fit
            from scratch that stops short warns (ConvergenceWarning); a warm one is only flagged.
        averages : array-like of int, shape (m,), optional
            How many readouts each line's values average (a line measured again; default 1 each): its noise
            variance is ``noise_var / averages``.

        Returns
        -------
        self
            With the fitted attributes of :class:`~adaptcs.models._line_model.LineModel`: ``coef_`` the separable
            wavelet coefficients, ``p0_`` and ``v0_`` per pair of scales (class ``s_y * (level + 1) + s_x``; p0 of the
            always-on coarsest pair is 1), ``converged_`` EP at its fixed point (the strict test) and, when
            learning, the learned values at theirs.
        """
        started = time.process_time()
        self._validate_params()
        if not np.all(np.isfinite(kspace_lines)):
            raise ValueError("kspace_lines must be finite (a NaN or inf sample: leave the line out instead)")
        scan = LineScan(self.basis, lines)
        weight = np.sqrt(check_averages(averages, scan.A.shape[0]))  # whitens a line that averages readouts
        Z = scan.column_data(np.asarray(kspace_lines) * weight[:, None])
        y = stack_columns(Z)
        if self._scale is None or not warm:
            self._scale = power_of_two_scale(y)
        c = self._scale
        ny, nx = self.basis.shape
        rows = SharedBlockRows(real_form(scan.A * weight[:, None]), nx)
        problem = EPProblem(rows.dense() if self.dense_rows else rows, y / c, self.coef_group, np.zeros(nx * ny),
                            group_class=self.group_class, coef_slab=self.coef_slab,
                            slab_profile=None if self.profile is None else self._slab_profile,
                            v_inf_ratio=self.v_inf_ratio, damping=self.damping, damping_decay=self.damping_decay)
        noise = self.noise_var / 2.0 / c**2
        warm_state = self._state if warm and self._state is not None else None
        if warm_state is None:  # a fit from scratch is read: the fallback takes it to EP's fixed point where it can
            problem.fallback = stable_ep
        start = None
        if warm_state is None:
            level = np.full(problem.n_levels, float(logit(self.p0)))
            v0 = problem.tied_v0(level, noise) if self.v0 is None else np.full(problem.n_slabs, self.v0 / c**2)
            start = Hyper(level, v0, noise)
        learned = fit_lines_ep(problem, start, warm_state, self.learn, tol=self.tol, max_iter=self.max_iter)
        run = learned.run
        self._state = (run.sites, learned.hyper, learned.refits)
        self._run, self.scan_ = run, scan
        converged, reasons, columns = fit_outcome(problem, learned, self.learn, tol=self.tol, max_iter=self.max_iter,
                                                  n_blocks=nx)
        coef = unstack_columns(run.post.mean * c, ny)
        p0 = np.ones(self.n_classes)
        p0[1:] = expit(learned.hyper.level)
        v0 = learned.hyper.v0 * c**2 if self.profile is None else learned.hyper.v0[0] * c**2 * self.profile
        self._set_fitted(coef=coef, image=self.basis.inverse(coef), p0=p0, v0=v0, converged=converged,
                         residual=float(run.residual), log_evidence=float(
                             run.log_evidence - y.shape[0] * np.log(c) + 2.0 * nx * np.sum(np.log(weight))),
                         n_iter=run.n_iter, started=started, reasons=reasons, columns_not_converged=columns)
        if not warm and not converged:  # a fit someone reads (warm refits only choose the next line)
            warn_not_converged(type(self).__name__, reasons + [f"{columns} of {nx} columns stopped short"],
                               stacklevel=3)
        return self

    @with_blas_limit
    def line_gains(self, candidates=None) -> np.ndarray:
        """Exact information gain (nats) of measuring each candidate line next, under the last fit's posterior.

        ``gain(k) = sum_j 1/2 log det(I_2 + B_k V_j B_k^T / (s2 / 2))``, B_k the real form of line k's row
        in coefficient space, V_j EP's covariance of column j (docs/mri.md). O(nx m ny k) for k candidates.

        Parameters
        ----------
        candidates : array-like of int, optional
            Rows of the centred k-space; default every row.

        Returns
        -------
        ndarray, shape (k,)
        """
        self._check_posterior("ask for line gains")
        if self.dense_rows:
            raise ValueError("line gains need the block-diagonal path (dense_rows=False)")
        ny = self.basis.shape[0]
        candidates = np.arange(ny) if candidates is None else np.atleast_1d(np.asarray(candidates, dtype=np.intp))
        if candidates.ndim != 1 or np.any((candidates < 0) | (candidates >= ny)):
            raise ValueError(f"candidates must be rows of the centred k-space, 0..{ny - 1}")
        R1, R2 = self._candidate_rows(candidates)
        post = self._run.post
        return gains_of_lines(post.factor, post.block_prior_var, R1, R2, self._run.hyper.noise_var)

    def _candidate_rows(self, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The real rows of candidate lines in coefficient space, the same in every column: 2 x (1, k, 2ny)."""
        a = self.scan_.Fy_Wt[candidates]  # (k, ny) complex
        return np.hstack([a.real, -a.imag])[None], np.hstack([a.imag, a.real])[None]


    @with_blas_limit
    def errors_after_line(self, candidates, kspace_candidates: np.ndarray, image: np.ndarray,
                          chunk: int = 16) -> np.ndarray:
        """Squared error of the posterior mean image after measuring each candidate line with the given values, one
        Gaussian update of the last fit (its sites held): what a greedy oracle that knows the image minimises.

        ``m' = m + V B^T (B V B^T + s2/2 I)^{-1} (z - B m)`` per column (B the real form of the line's row, z its
        values in coefficient columns; :func:`adaptcs.models._line_gaussian.errors_after_lines`); the error is the
        image's l2 error (the transforms are unitary). O(nx ny^2 k) for k candidates.

        Parameters
        ----------
        candidates : array-like of int, shape (k,)
            Rows of the centred k-space not yet measured.
        kspace_candidates : ndarray of complex, shape (k, nx)
            Their values (a retrospective scan: read from the full k-space).
        image : ndarray of complex, shape (ny, nx)
            The true image (the oracle's knowledge).
        chunk : int
            Candidates per stacked product (memory: 2 nx ny chunk numbers per operand).

        Returns
        -------
        ndarray, shape (k,)
            In the squared units of the k-space data.
        """
        self._check_posterior("ask for errors after a line")
        ny, nx = self.basis.shape
        candidates, kspace_candidates = checked_candidates(candidates, kspace_candidates, (ny, nx), image)
        c, post, s = self._scale, self._run.post, self._run.hyper.noise_var
        mean = post.mean.reshape(nx, 2 * ny)
        truth = stack_columns(self.basis.forward(np.asarray(image))).reshape(nx, 2 * ny) / c
        values = kspace_candidates @ self.scan_._UH / c  # (k, nx): the candidates' columns
        out = np.empty(candidates.shape[0])
        for lo in range(0, candidates.shape[0], chunk):
            idx = slice(lo, lo + chunk)
            R1, R2 = self._candidate_rows(candidates[idx])
            out[idx] = errors_after_lines(mean, truth, post.factor, post.block_prior_var, R1, R2, values[idx], s)
        return out * c**2

    @with_blas_limit
    def images_after_line(self, candidates, kspace_candidates: np.ndarray) -> np.ndarray:
        """The posterior mean image after measuring each candidate line alone with the given values (one Gaussian
        update of the last fit, its sites held, as :meth:`errors_after_line`): shape (k, ny, nx), complex."""
        self._check_posterior("ask for images after a line")
        ny, nx = self.basis.shape
        candidates, kspace_candidates = checked_candidates(candidates, kspace_candidates, (ny, nx))
        c, post = self._scale, self._run.post
        R1, R2 = self._candidate_rows(candidates)
        new = means_after_lines(post.mean.reshape(nx, 2 * ny), post.factor, post.block_prior_var, R1, R2,
                                kspace_candidates @ self.scan_._UH / c, self._run.hyper.noise_var)  # (nx, 2ny, k)
        return np.stack([self.basis.inverse(unstack_columns(new[:, :, j].reshape(-1) * c, ny))
                         for j in range(candidates.shape[0])])


def pair_profile(basis: SeparableWavelet, images) -> np.ndarray:
    """Slab variances per pair of scales, relative to each other, from training images (never the ones to
    reconstruct): the mean squared magnitude of each pair's coefficients (halved: per real part), divided by its mean
    over all coefficients (:func:`adaptcs.bases.images.scale_profile` for separable pairs).

    Parameters
    ----------
    basis : SeparableWavelet
    images : ndarray, shape (k, ny, nx), complex or real

    Returns
    -------
    ndarray, shape (K,)
        One positive value per pair class ``s_y * (level + 1) + s_x``.
    """
    images = np.asarray(images)
    if images.ndim != 3 or images.shape[1:] != basis.shape:
        raise ValueError(f"images must have shape (k, {basis.shape[0]}, {basis.shape[1]}); got {images.shape}")
    pair = basis.scale_pair()
    power = np.mean([np.abs(basis.forward(im)) ** 2 for im in images], axis=0) / 2.0
    classes = int(pair.max()) + 1
    second_moment = np.bincount(pair.ravel(), power.ravel(), minlength=classes) / np.bincount(pair.ravel(),
                                                                                             minlength=classes)
    if not np.all(second_moment > 0.0):
        raise ValueError("the training images have no energy at some pair of scales: no profile")
    return second_moment / float(np.mean(second_moment[pair]))
