"""A receive array's lines: the phase-aware Gaussian line model with coil sensitivities, exact and block diagonal.

Every coil ``c`` of an array sees the image through its sensitivity, ``s_c x``; a phase encode ``ky`` is read by
every coil at once. After the inverse DFT along the readout, column ``x`` of pixels is measured by
``[S F_y diag(s_c(:, x)) ]`` stacked over the coils, and by nothing else: the posterior stays exactly block diagonal
over the columns, as for one coil (:mod:`adaptcs.models.line_phase`, whose prior, phase and trust ``eps_x`` this
model keeps: the unknowns are the y-wavelet coefficients ``a + i b`` of ``exp(-i phi) x`` along each column, ``a`` of
variance ``v p_s w_x``, ``b`` of ``eps_x`` times it).

With ``C`` coils a column holds ``2 m C`` real values, more than its ``2 ny`` unknowns once ``m C > ny`` (64 lines of 8
coils against 256 rows), so every column's posterior is computed in the unknowns' space, not the data's:

- precision ``Q_x = Lambda_x^{-1} + H_x / s``, with ``H_x`` the real form of ``W_y (T_S o G_x) W_y^T``:
  ``T_S = F_y[S]^H F_y[S]`` (the measured lines' circulant, weighted by the readouts each line averages) times,
  element by element, the coils' cross-products ``G_x[j, l] = sum_c conj(e_c(j)) e_c(l)`` of the phased maps
  ``e_c = s_c exp(i phi)``: O(nx ny^2 (C + ny)) to build, however many lines;
- data ``t_x = W_y sum_c conj(e_c) o z_c`` (``z_c`` the coil's zero-filled column), evidence by the determinant
  lemma, ``-1/2 (|z|^2 / s - t^T Q^{-1} t / s^2 + r log s + log det Lambda + log det Q + r log 2 pi)``;
- the posterior covariance kept in the image's space (``exp(-i phi) x``, real and imaginary parts), where a line's
  rows are ``F_y[ky] diag(e_c)``: a refit that keeps ``v`` and ``eps_x`` adds a line by an exact rank-``2C`` update
  (O(nx ny^2 C)), and the information gain of every line, ``sum_x 1/2 log det(I_2C + B V B^T / s)``, needs each
  line's ``C x C`` covariance and pseudo-covariance, which for all ``ky`` at once are the diagonals of
  ``F diag(e_c) Sigma diag(conj e_c') F^H`` and ``F diag(e_c) Gamma diag(e_c') F^T``: one FFT per coil and one
  product per column, O(nx C ny^2 (log ny + C)).

The phase is that of the coil-combined image of the measured band lines, ``sum_c conj(s_c) z_c / sum_c |s_c|^2``
(SENSE with the band alone; 0 where no coil sees the pixel); ``v`` and every ``eps_x`` are learned as for one coil
(the full evidence, and the conditional evidence of the lines outside the band), except that ``eps_x`` is the grid
value of largest conditional evidence (:data:`EPS_TOLERANCE_COILS`), not the smallest within
:func:`~.line_phase.eps_tolerance` of it. With one coil of sensitivity 1 and ``eps_tolerance=None`` the model is
:class:`~.line_phase.PhaseLineGaussian`
(tests/test_line_coils.py checks it; and the posterior, evidence and gains against a dense model of the whole image
built from the FFTs on small sizes).

Sensitivities and data must be prewhitened together (:func:`adaptcs.mri.coils.prewhiten`): every coil's noise is
white of variance ``noise_var`` per complex sample and independent of the other coils'.

Over 500 lines: one estimator whose fit, learning (``v`` and the trust grid), posterior and exact updates share its
per-column state and are read in that order; the line moments and gains are already apart
(:mod:`adaptcs.models._coil_moments`).
"""

from __future__ import annotations

import time
from numbers import Integral, Real

import numpy as np
from scipy.linalg import lapack
from scipy.optimize import minimize_scalar
from sklearn.utils._param_validation import Interval

from adaptcs.bases.separable import SeparableWavelet, centre_lines, centred_dft
from adaptcs.models._base import with_blas_limit
from adaptcs.models._coil_moments import (
    check_sensitivities,
    downdate_line_moments,
    gains_from_moments,
    least_squares_image,
    line_moments,
    real_covariance,
    real_form_stack,
    seen_pixels,
    widely_linear,
)
from adaptcs.models._line_model import LineModel, check_averages
from adaptcs.models._spectral import spectral_weights
from adaptcs.models.line_phase import (
    COLUMN_FLOOR,
    EPS_GRID,
    LEARN_ROUNDS,
    LOG_V_SPAN,
    PhaseLineGaussian,
    eps_tolerance,
    solve_lower,
)

#: Refits of a design loop (``warm=True``) keep ``v`` and ``eps_x`` and add the new lines by an exact update of the
#: posterior until this many lines have been added since the values were last learned; then they learn them again
#: (from the last ``eps_x``, at most two rounds). A fit that is read learns them from scratch.
RELEARN_EVERY = 8
#: Nats within which a column's conditional evidence counts as the best (the smallest such ``eps`` is taken): 0, the
#: best. Chosen on the first 4 Colin27 training slices, 8 simulated coils at 128 x 128, 4 fixed masks at R = 8-4, in
#: the three phase regimes: against one coil's rule (2 nats, and 0.3 per line outside the band) the best ``eps``
#: reconstructs by +0.22 +- 0.09 dB [10/16] (spin echo), +1.06 +- 0.14 [16/16] (gradient echo) and
#: +0.59 +- 0.14 [15/16] (susceptibility), a flat 2 nats by +0.14, +0.38, +0.25: with a rough phase the band's
#: estimate is trusted too often, and the coils need it less.
EPS_TOLERANCE_COILS = 0.0


class CoilPhaseLineGaussian(LineModel):
    """The phase-aware Gaussian line model of a receive array (module docstring), a
    :class:`~adaptcs.models._line_model.LineModel` fitted on every coil's lines.

    Parameters
    ----------
    basis : SeparableWavelet
        Only its y-wavelet is used (columns are pixels along x).
    sensitivities : array-like of complex, shape (coils, ny, nx)
        The coils' sensitivities (prewhitened with the data), e.g. :func:`adaptcs.mri.coils.espirit_maps` of the
        centre lines or :func:`adaptcs.mri.coils.simulated_sensitivities`.
    noise_var : float
        Noise variance per complex k-space sample of every (prewhitened) coil.
    profile : ndarray, shape (level + 1,), optional
        Relative variances per y-scale (:func:`adaptcs.models.line_phase.magnitude_profile`); None: all equal.
    band : int, optional
        The central lines the phase is estimated from (those of them measured); default ny / 16.
    eps : float in (0, 1], optional
        Every column's imaginary share held at this value instead of learned (None, the default).
    relearn_every : int
        A design loop's refits (``warm=True``) learn ``v`` and ``eps_x`` again once this many lines were added since
        they were last learned, and add lines by an exact update at the held values in between.
    eps_tolerance : float >= 0 or None
        Nats within which a column's conditional evidence counts as the best when ``eps_x`` is learned (the
        smallest such grid value is taken); default :data:`EPS_TOLERANCE_COILS`; None: one coil's rule,
        :func:`~.line_phase.eps_tolerance` of the lines outside the band.

    Notes
    -----
    ``fit`` takes the lines of every coil, ``kspace_lines`` of shape (m, coils, nx) (line first, as
    :class:`adaptcs.operators.CoilKSpaceLines` reads them). The fitted attributes are those of
    :class:`~adaptcs.models.line_phase.PhaseLineGaussian`: ``image_`` is the posterior mean of the image ``x``
    whose coil images are ``s_c x``, 0 where no coil's sensitivity is (outside ESPIRiT's support no data bear on
    ``x`` and its mean would be the prior's interpolation from the pixels around, unbounded by any measurement;
    SENSE's image is 0 there too), ``eps_`` (nx,) the trust per column; ``learned_lines_`` the line count of the
    fit that last learned ``v`` and ``eps_x`` from scratch.

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.mri.data import colin27_kspace
    >>> from adaptcs.bases.separable import SeparableWavelet, centre_lines
    >>> from adaptcs.mri.coils import prewhiten
    >>> acq = colin27_kspace(32, coils=4)[0]      # simulated: 4 coils, (4, 32, 32), correlated noise
    >>> kspace, maps = (prewhiten(a, acq.noise_covariance) for a in (acq.kspace, acq.sensitivities))
    >>> lines = centre_lines(32, 8)
    >>> from adaptcs.models.line_coils import CoilPhaseLineGaussian
    >>> model = CoilPhaseLineGaussian(SeparableWavelet((32, 32), "db2", 2), sensitivities=maps, noise_var=1.0)
    >>> model = model.fit(kspace[:, lines].transpose(1, 0, 2), lines)
    >>> model.converged_, model.image_.shape
    (True, (32, 32))
    >>> gains = model.line_gains()
    >>> bool(gains[lines].max() < gains.max())
    True
    """

    relearn_when_read = True
    _posterior_attributes = ("_post", "_state", "_fitted_lines")

    _parameter_constraints = {
        "basis": [SeparableWavelet],
        "sensitivities": ["array-like"],
        "noise_var": [Interval(Real, 0, None, closed="neither")],
        "profile": ["array-like", None],
        "band": [Interval(Integral, 1, None, closed="left"), None],
        "eps": [Interval(Real, 0, 1, closed="right"), None],
        "relearn_every": [Interval(Integral, 1, None, closed="left")],
        "eps_tolerance": [Interval(Real, 0, None, closed="left"), None],
    }

    def __init__(self, basis: SeparableWavelet, *, sensitivities, noise_var: float, profile=None,
                 band: int | None = None, eps: float | None = None, relearn_every: int = RELEARN_EVERY,
                 eps_tolerance: float | None = EPS_TOLERANCE_COILS):
        if not noise_var > 0.0 or not np.isfinite(noise_var):
            raise ValueError(f"noise_var must be positive and finite; got {noise_var}")
        self.basis, self.sensitivities, self.noise_var = basis, sensitivities, noise_var
        self.profile, self.band, self.eps, self.relearn_every = profile, band, eps, relearn_every
        self.eps_tolerance = eps_tolerance
        ny, nx = basis.shape
        self._maps = check_sensitivities(sensitivities, (ny, nx))
        self._seen = seen_pixels(self._maps)  # (ny, nx): least_squares_image's rule
        self._profile = np.ones(basis.level + 1) if profile is None else np.asarray(profile, dtype=np.float64)
        if self._profile.shape != (basis.level + 1,) or not np.all(self._profile > 0):
            raise ValueError(f"profile must hold {basis.level + 1} positive values (one per y-scale)")
        self._band = centre_lines(ny, max(1, ny // 16) if band is None else int(band))
        self._Fy = centred_dft(ny)
        self._Fx_conj = np.conj(centred_dft(nx))
        self._phase_key = None  # the band lines the phase came from
        self._state = None  # (v, eps) of the last fit
        self._post = None  # the posterior in the image's space
        self._fitted_lines = None  # (lines, averages) of the last fit
        self._learned_at = 0  # lines of the fit that last learned v and eps_x
        self.learned_lines_ = None

    @property
    def n_coils(self) -> int:
        return int(self._maps.shape[0])

    # --- the operator --------------------------------------------------------------------------------------------

    def _prepare(self, hybrid: np.ndarray, lines: np.ndarray) -> None:
        """The phase of the coil-combined band image and the column weights (cached while the band lines measured
        stay the same); ``hybrid`` (m, C, nx) the lines after the inverse DFT along the readout."""
        in_band = np.isin(lines, self._band)
        key = tuple(sorted(lines[in_band].tolist()))
        if key == self._phase_key:
            return
        ny, nx = self.basis.shape
        if key:
            coil_images = np.einsum("ky,kcx->cyx", np.conj(self._Fy[lines[in_band]]), hybrid[in_band])
            image = least_squares_image(coil_images, self._maps)
            self.phase_ = np.angle(image)
            energy = np.mean(np.abs(image) ** 2, axis=0)
            self.column_weight_ = energy / energy.mean() + COLUMN_FLOOR
        elif self.eps == 1.0:
            self.phase_, self.column_weight_ = np.zeros((ny, nx)), np.full(nx, 1.0 + COLUMN_FLOOR)
        else:
            raise ValueError(f"no line of the central band ({self._band[0]}..{self._band[-1]}) is measured: the phase "
                             "cannot be estimated; measure the centre lines first (or fit the phase-blind end, "
                             "eps=1)")
        self._phased = self._maps * np.exp(1j * self.phase_)[None]  # e_c = s_c exp(i phi), (C, ny, nx)
        self._phase_key = key

    def _normal_equations(self, hybrid: np.ndarray, lines: np.ndarray, weight: np.ndarray) -> dict:
        """Every column's data in the unknowns' space: the real form of ``H_x`` (nx, 2ny, 2ny), ``t_x`` (nx, 2ny),
        ``|z_x|^2`` (nx,) and the real values per column ``r`` (module docstring); lines weighted by ``weight``."""
        w2 = weight ** 2
        rows = self._Fy[lines]  # (m, ny)
        circulant = np.conj(rows).T @ (w2[:, None] * rows)  # T_S, (ny, ny)
        e = np.moveaxis(self._phased, 2, 0)  # (nx, C, ny)
        cross = np.matmul(np.conj(e).transpose(0, 2, 1), e)  # G_x, (nx, ny, ny)
        H = self._analyse_both(circulant[None] * cross)
        zero_filled = np.einsum("ky,kcx->xcy", np.conj(rows), w2[:, None, None] * hybrid)  # (nx, C, ny)
        t = np.sum(np.conj(e) * zero_filled, axis=1) @ self.basis.Wy.T  # (nx, ny): W_y sum_c conj(e_c) z_c
        zz = np.einsum("k,kcx->x", w2, np.abs(hybrid) ** 2)
        return {"H": real_form_stack(H), "t": np.concatenate([t.real, t.imag], axis=1), "zz": zz,
                "r": 2 * lines.shape[0] * self.n_coils}

    def _analyse_both(self, X: np.ndarray) -> np.ndarray:
        """``W_y X W_y^T`` for a stack of complex (k, ny, ny)."""
        W = self.basis.Wy
        return (W @ X.real @ W.T) + 1j * (W @ X.imag @ W.T)

    def _synthesise_both(self, X: np.ndarray) -> np.ndarray:
        """``W_y^T X W_y`` for a stack of complex (k, ny, ny)."""
        W = self.basis.Wy
        return (W.T @ X.real @ W) + 1j * (W.T @ X.imag @ W)

    def _coil_rows(self, lines: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """The complex rows of the lines in every column in the image's space, ``F_y[ky] diag(e_c)`` weighted by
        ``weight`` (k,): shape (nx, k, C, ny)."""
        rows = weight[:, None, None, None] * self._Fy[lines][:, None, :, None] * self._phased[None]  # (k, C, ny, nx)
        return np.moveaxis(rows, 3, 0)

    def _line_rows(self, lines: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """Real rows of the lines in every column in the image's space: (nx, 2 k C, 2ny), line by line, each line's
        C real-part rows then its C imaginary-part rows; weighted by ``weight`` (k,)."""
        rows = self._coil_rows(lines, weight)  # (nx, k, C, ny)
        re = np.concatenate([rows.real, -rows.imag], axis=3)
        im = np.concatenate([rows.imag, rows.real], axis=3)
        nx, k, C, b = re.shape
        return np.concatenate([re, im], axis=2).reshape(nx, 2 * k * C, b)

    # --- fitting -------------------------------------------------------------------------------------------------

    @with_blas_limit
    def fit(self, kspace_lines: np.ndarray, lines, *, warm: bool = False, averages=None) -> CoilPhaseLineGaussian:
        """The exact posterior on every coil's measured lines; ``v`` and every column's ``eps_x`` learned (module
        docstring). ``warm`` (a design loop's refit): the lines added since the last fit by an exact update at the
        held values, or the values learned again from the last ``eps_x`` (at most two rounds) once
        ``relearn_every`` lines were added since they were. ``averages`` (m,): readouts each line's values average.

        Parameters
        ----------
        kspace_lines : ndarray of complex, shape (m, coils, nx)
            Every coil's values of the measured lines of the centred k-space.
        lines : array-like of int, shape (m,)
            Their rows, distinct.
        """
        started = time.process_time()
        self._validate_params()
        lines = np.asarray(lines, dtype=np.intp)
        kspace_lines = np.asarray(kspace_lines)
        ny, nx = self.basis.shape
        if kspace_lines.shape != (lines.shape[0], self.n_coils, nx) or not np.all(np.isfinite(kspace_lines)):
            raise ValueError(f"kspace_lines must be finite with shape ({lines.shape[0]}, {self.n_coils}, {nx}) "
                             f"(lines, coils, readout); got {kspace_lines.shape}")
        if np.unique(lines).shape[0] != lines.shape[0] or np.any((lines < 0) | (lines >= ny)):
            raise ValueError(f"lines must be distinct rows of the centred k-space, 0..{ny - 1}")
        averages = check_averages(averages, lines.shape[0])
        weight = np.sqrt(averages)
        hybrid = kspace_lines @ self._Fx_conj  # (m, C, nx)
        key = self._phase_key
        self._prepare(hybrid, lines)
        s = self.noise_var / 2.0
        added = self._added_lines(lines, averages) if warm and key == self._phase_key else None
        if added is not None and lines.shape[0] - self._learned_at < self.relearn_every:
            self._update(hybrid[added], lines[added], weight[added], s)
            v, eps = self._state
        else:
            data = self._normal_equations(hybrid, lines, weight)
            if self.eps is not None:
                eps = np.full(nx, float(self.eps))
                v = self._best_v(data, eps, s)
            else:
                in_band = np.isin(lines, self._band)
                band = self._band_grams(hybrid[in_band], lines[in_band], weight[in_band]) \
                    if not np.all(in_band) else None
                if warm and self._state is not None:
                    v, eps = self._learn(data, band, s, start=self._state[1], rounds=2)
                else:
                    v, eps = self._learn(data, band, s)
                    self.learned_lines_ = lines.shape[0]
            self._learned_at = lines.shape[0]
            self._post = self._posterior(data, v, eps, s)
        self._post["evidence_offset"] = 2.0 * nx * self.n_coils * float(np.sum(np.log(weight)))
        self._state, self._fitted_lines = (v, eps), (lines.copy(), averages.copy())
        mean = self._post["mean"]  # (nx, 2ny): [Re; Im] of exp(-i phi) x per column
        if not np.all(np.isfinite(mean)) or not np.isfinite(self._post["evidence"]):
            self._post = self._state = self._fitted_lines = None  # nothing of this fit is kept for a warm one
            raise ValueError(f"the coil line model's posterior is not finite with noise_var {self.noise_var:g} and "
                             f"k-space values up to {np.max(np.abs(kspace_lines)):g}: prewhiten the coils (noise "
                             "variance 1) or rescale the data and the noise variance together")
        demodulated = (mean[:, :ny] + 1j * mean[:, ny:]).T  # (ny, nx)
        self.eps_ = eps
        image = np.where(self._seen, np.exp(1j * self.phase_) * demodulated, 0.0)  # 0 where no coil sees
        self._set_fitted(coef=self.basis.Wy @ demodulated, image=image,
                         p0=np.ones(self._profile.shape[0]), v0=v * self._profile, converged=True, residual=0.0,
                         log_evidence=self._post["evidence"] + self._post["evidence_offset"], n_iter=0,
                         started=started)
        return self

    def _added_lines(self, lines: np.ndarray, averages: np.ndarray) -> np.ndarray | None:
        """Indices of the lines added since the last fit when the last fit's lines (and averages) are the first
        ones of these; None otherwise (or with nothing fitted)."""
        if self._post is None or self._fitted_lines is None:
            return None
        old, old_averages = self._fitted_lines
        k = old.shape[0]
        if k >= lines.shape[0] or not np.array_equal(lines[:k], old) or not np.array_equal(averages[:k], old_averages):
            return None
        return np.arange(k, lines.shape[0])

    def _prior_var(self, v: float, eps: np.ndarray) -> np.ndarray:
        """(nx, 2ny): the prior variances of every column's real and imaginary parts."""
        ny, nx = self.basis.shape
        shape = self._profile[self.basis.scale_y]
        lam = np.empty((nx, 2 * ny))
        lam[:, :ny] = shape[None, :]
        lam[:, ny:] = np.asarray(eps, dtype=np.float64)[:, None] * shape[None, :]
        return v * self.column_weight_[:, None] * lam

    @staticmethod
    def _cholesky(data: dict, lam: np.ndarray, s: float) -> np.ndarray:
        """Batched Cholesky factor of ``Q = Lambda^{-1} + H / s``, (nx, 2ny, 2ny)."""
        Q = data["H"] / s
        idx = np.arange(Q.shape[1])
        Q[:, idx, idx] += 1.0 / lam
        return np.linalg.cholesky(Q)

    @classmethod
    def _column_evidence(cls, data: dict, lam: np.ndarray, s: float, chol=None) -> np.ndarray:
        """log p(z_x) of every column at prior variances ``lam`` (nx, 2ny), by the determinant lemma: (nx,)."""
        chol = cls._cholesky(data, lam, s) if chol is None else chol
        white = solve_lower(chol, data["t"])
        log_det = 2.0 * np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2)), axis=1)
        r = data["r"]
        return -0.5 * (data["zz"] / s - np.sum(white * white, axis=1) / s / s + r * np.log(s)
                       + np.sum(np.log(lam), axis=1) + log_det + r * np.log(2.0 * np.pi))

    def _best_v(self, data: dict, eps: np.ndarray, s: float, cache: dict | None = None) -> float:
        """``v`` of largest evidence at ``eps`` (nx,): per column ``H~ = Lambda_1^{1/2} H Lambda_1^{1/2}`` (the prior
        at v = 1) ``= U diag(w) U^T`` and ``rho = (U^T Lambda_1^{1/2} t)^2`` (by :func:`~._spectral.spectral_weights`,
        without forming ``U``), then
        ``-2 log p = sum_k log(1 + v w_k / s) - v / s^2 sum_k rho_k / (1 + v w_k / s)`` + const, a bounded search
        on log v around the moment estimate (as :meth:`~.line_phase.PhaseLineGaussian._best_v`). Only the columns
        whose ``eps`` changed since the ``cache``'s last call are decomposed."""
        if cache and "eps" in cache:
            todo = np.flatnonzero(cache["eps"] != eps)
            w, rho = cache["w"].copy(), cache["rho"].copy()
        else:
            todo = np.arange(eps.shape[0])
            w, rho = np.empty(data["t"].shape), np.empty(data["t"].shape)
        if todo.shape[0]:
            root = np.sqrt(self._prior_var(1.0, eps)[todo])  # (k, 2ny)
            values, rho[todo] = spectral_weights(root[:, :, None] * data["H"][todo] * root[:, None, :],
                                                 root * data["t"][todo])
            w[todo] = np.maximum(values, 0.0)
        if cache is not None:
            cache.update(eps=eps.copy(), w=w, rho=rho)

        def neg_evidence(log_v):
            v = np.exp(log_v)
            ratio = 1.0 + v * w / s
            return 0.5 * float(np.sum(np.log(ratio)) - v / s * (np.sum(rho / ratio) / s))

        total = float(np.sum(data["zz"]))
        real_values = data["r"] * eps.shape[0]
        power = float(np.sum(w)) / real_values  # the mean eigenvalue of the data-space covariance at v = 1
        mean_square = total / real_values
        start = max(mean_square - s, 1e-3 * mean_square) / max(power, 1e-300)
        result = minimize_scalar(neg_evidence, bounds=(np.log(start) - LOG_V_SPAN, np.log(start) + LOG_V_SPAN),
                                 method="bounded", options={"xatol": 1e-4})
        return float(np.exp(result.x))

    def _band_grams(self, hybrid: np.ndarray, lines: np.ndarray, weight: np.ndarray) -> dict:
        """The band lines' data in the data's space (``2 m_band C`` real values per column, fewer than the
        unknowns): their covariance at ``v = 1`` in two parts, ``K_x = v (G_a + eps_x G_b) + s I`` (``G_a`` from
        the real part ``a``, ``G_b`` from ``b``, each (nx, r, r)), and their values ``z`` (nx, r)."""
        ny = self.basis.shape[0]
        rows = self._coil_rows(lines, weight).reshape(self.basis.shape[1], -1, ny)  # (nx, m C, ny)
        rows = (rows.real @ self.basis.Wy.T) + 1j * (rows.imag @ self.basis.Wy.T)  # on the y-wavelet coefficients
        root = np.sqrt(self._prior_var(1.0, np.ones(self.basis.shape[1]))[:, :ny])  # (nx, ny)
        part_a = np.concatenate([rows.real, rows.imag], axis=1) * root[:, None, :]
        part_b = np.concatenate([-rows.imag, rows.real], axis=1) * root[:, None, :]
        values = np.moveaxis(weight[:, None, None] * hybrid, 2, 0).reshape(self.basis.shape[1], -1)  # (nx, m C)
        return {"G_a": np.matmul(part_a, part_a.transpose(0, 2, 1)),
                "G_b": np.matmul(part_b, part_b.transpose(0, 2, 1)),
                "z": np.concatenate([values.real, values.imag], axis=1), "lines": lines.shape[0]}

    def _best_eps(self, data: dict, band: dict | None, s: float, v: float) -> np.ndarray:
        """Per column, the smallest ``eps`` of :data:`~.line_phase.EPS_GRID` whose evidence of the lines outside the
        band given those in it (``band``: the band lines' :meth:`_band_grams`; None: no line lies outside, and every
        column gets the grid's smallest), at ``v``, is within ``eps_tolerance`` nats of the
        largest."""
        nx = data["t"].shape[0]
        if band is None:
            return np.full(nx, EPS_GRID[0])
        eye = s * np.eye(band["z"].shape[1])
        full = self._evidence_over_eps(data, v, s, EPS_GRID)
        scores = np.array([full[i] - PhaseLineGaussian._column_evidence(v * (band["G_a"] + eps * band["G_b"]) + eye,
                                                                        band["z"], s)
                           for i, eps in enumerate(EPS_GRID)])
        n_outside = data["r"] // (2 * self.n_coils) - band["lines"]
        tolerance = eps_tolerance(n_outside) if self.eps_tolerance is None else float(self.eps_tolerance)
        near_best = scores >= scores.max(axis=0) - tolerance
        return np.asarray(EPS_GRID)[np.argmax(near_best, axis=0)]

    def _evidence_over_eps(self, data: dict, v: float, s: float, grid) -> np.ndarray:
        """log p(z_x) of every column at ``v`` and every ``eps`` of ``grid`` (the same in every column): shape
        (len(grid), nx). ``eps`` moves only the prior of the imaginary part ``b``, so with ``Q`` split into the
        blocks of ``a`` and ``b`` the Cholesky factor of ``Q_aa`` and the Schur complement
        ``S_0 = Q_bb - Q_ba Q_aa^{-1} Q_ab`` (without ``b``'s prior) serve every ``eps``: each costs one Cholesky of
        ``S_0 + diag(1 / (eps lambda_a))``, of half the size (an eighth of the flops)."""
        ny = self.basis.shape[0]
        H, t = data["H"], data["t"]
        lam_a = self._prior_var(v, np.ones(t.shape[0]))[:, :ny]  # (nx, ny); b's prior is eps times it
        Q_aa = H[:, :ny, :ny] / s
        idx = np.arange(ny)
        Q_aa[:, idx, idx] += 1.0 / lam_a
        chol_a = np.linalg.cholesky(Q_aa)
        cross = solve_lower(chol_a, H[:, :ny, ny:] / s)  # L_a^{-1} Q_ab, (nx, ny, ny)
        schur = H[:, ny:, ny:] / s - np.matmul(cross.transpose(0, 2, 1), cross)
        white_a = solve_lower(chol_a, t[:, :ny])
        rest = t[:, ny:] - np.einsum("xab,xa->xb", cross, white_a)
        log_det_a = 2.0 * np.sum(np.log(np.diagonal(chol_a, axis1=1, axis2=2)), axis=1)
        quad_a = np.sum(white_a * white_a, axis=1)
        r = data["r"]
        out = []
        for eps in grid:
            S = schur.copy()
            S[:, idx, idx] += 1.0 / (eps * lam_a)
            chol_b = np.linalg.cholesky(S)
            white_b = solve_lower(chol_b, rest)
            log_det = log_det_a + 2.0 * np.sum(np.log(np.diagonal(chol_b, axis1=1, axis2=2)), axis=1)
            quad = quad_a + np.sum(white_b * white_b, axis=1)
            log_prior = np.sum(np.log(lam_a), axis=1) * 2.0 + ny * np.log(eps)
            out.append(-0.5 * (data["zz"] / s - quad / s / s + r * np.log(s) + log_prior + log_det
                               + r * np.log(2.0 * np.pi)))
        return np.array(out)

    def _learn(self, data: dict, band: dict | None, s: float, start: np.ndarray | None = None,
               rounds: int = LEARN_ROUNDS) -> tuple[float, np.ndarray]:
        """``v`` by the full evidence and ``eps_x`` by the conditional one (:meth:`_best_eps`), in turn from
        ``start`` (default the grid's smallest), until ``eps_x`` stops changing (at most ``rounds``)."""
        eps = np.full(data["t"].shape[0], EPS_GRID[0]) if start is None else np.asarray(start, dtype=np.float64)
        cache = {}
        for _ in range(rounds):
            v = self._best_v(data, eps, s, cache)
            new = self._best_eps(data, band, s, v)
            if np.array_equal(new, eps):
                break
            eps = new
        else:
            v = self._best_v(data, eps, s, cache)
        return v, eps

    def _posterior(self, data: dict, v: float, eps: np.ndarray, s: float) -> dict:
        """The posterior at ``v``, ``eps`` in the image's space: mean (nx, 2ny) and covariance (nx, 2ny, 2ny) of the
        real and imaginary parts of ``exp(-i phi) x`` per column, and the evidence."""
        ny = self.basis.shape[0]
        lam = self._prior_var(v, eps)
        chol = self._cholesky(data, lam, s)
        evidence = float(np.sum(self._column_evidence(data, lam, s, chol)))
        cov = np.empty_like(chol)
        for i in range(chol.shape[0]):  # Q^{-1} from its factor (LAPACK potri fills the lower triangle)
            inverse, info = lapack.dpotri(chol[i], lower=1)
            if info != 0:
                raise np.linalg.LinAlgError(f"posterior covariance failed (LAPACK info {info})")
            cov[i] = np.tril(inverse) + np.tril(inverse, -1).T
        mean = np.einsum("xab,xb->xa", cov, data["t"]) / s
        sigma, gamma = widely_linear(cov)  # of the y-wavelet coefficients, then of the column itself
        cov = real_covariance(self._synthesise_both(sigma), self._synthesise_both(gamma))
        Wt = self.basis.Wy.T
        mean = np.concatenate([mean[:, :ny] @ Wt.T, mean[:, ny:] @ Wt.T], axis=1)
        line_cov, line_pseudo = line_moments(self._phased, cov)
        return {"mean": mean, "cov": cov, "evidence": evidence, "line_cov": line_cov, "line_pseudo": line_pseudo}

    def _update(self, hybrid: np.ndarray, lines: np.ndarray, weight: np.ndarray, s: float) -> None:
        """Add lines to the posterior at the held values: the exact rank-``2kC`` update of every column's mean and
        covariance, and the evidence by the chain rule (``log p(z_new | z_old)``)."""
        B = self._line_rows(lines, weight)  # (nx, 2kC, 2ny)
        values = weight[:, None, None] * hybrid  # (k, C, nx)
        z = np.concatenate([values.real, values.imag], axis=1)  # (k, 2C, nx), as B's rows
        z = np.moveaxis(z, 2, 0).reshape(B.shape[0], -1)  # (nx, 2kC)
        post = self._post
        VB = np.matmul(post["cov"], B.transpose(0, 2, 1))  # (nx, 2ny, 2kC)
        S = np.matmul(B, VB)
        idx = np.arange(S.shape[1])
        S[:, idx, idx] += s
        chol = np.linalg.cholesky(S)
        residual = z - np.einsum("xrb,xb->xr", B, post["mean"])
        white = solve_lower(chol, residual)
        gain = solve_lower(chol, VB.transpose(0, 2, 1))  # L^{-1} B V, (nx, 2kC, 2ny)
        post["mean"] = post["mean"] + np.einsum("xrb,xr->xb", gain, white)
        post["cov"] = post["cov"] - np.matmul(gain.transpose(0, 2, 1), gain)
        downdate_line_moments(post["line_cov"], post["line_pseudo"], self._phased, gain)
        log_det = 2.0 * np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2)))
        post["evidence"] += -0.5 * float(np.sum(white * white) + log_det + z.size * np.log(2.0 * np.pi))

    # --- design --------------------------------------------------------------------------------------------------

    @with_blas_limit
    def line_gains(self, candidates=None) -> np.ndarray:
        """Exact information gain (nats) of each candidate line, read by every coil, under the last fit:
        ``sum_x 1/2 log det(I_2C + B_x V_x B_x^T / s)`` (module docstring), shape (k,): from every line's coil
        covariance and pseudo-covariance, kept with the posterior (:mod:`adaptcs.models._coil_moments`)."""
        self._check_posterior("ask for line gains")
        ny = self.basis.shape[0]
        candidates = np.arange(ny) if candidates is None else np.atleast_1d(np.asarray(candidates, dtype=np.intp))
        return gains_from_moments(self._post["line_cov"][:, candidates], self._post["line_pseudo"][:, candidates],
                                  self.noise_var / 2.0)
