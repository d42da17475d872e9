"""A line model that knows the image's phase: exact Gaussian posterior, column by column of pixels.

An MR image is a real magnitude times a smooth phase, ``x = exp(i phi) m``, so k-space is nearly conjugate symmetric
and the lines at +ky and -ky tell much the same (partial-Fourier reconstructions use this). A model whose real and
imaginary parts are independent (:class:`adaptcs.models.line_spike_slab.LineSpikeSlab`) cannot see it, and its
design takes lines on both sides of the centre. Here the phase ``phi`` is estimated from the low-frequency lines
measured (the zero-filled image of the central ``ny / 16`` lines) and the unknowns are the y-wavelet coefficients of
``exp(-i phi) x`` along each column of pixels: a real part ``a`` with slab variances per y-scale and an imaginary
part ``b`` (what the phase estimate misses) with ``eps`` times those variances. Every column x is then measured by
its own matrix ``S F_y diag(exp(i phi_x)) W_y^T`` (the phase varies along x), independently of the others: the
posterior is exactly block diagonal over the nx columns, Gaussian (no EP, always at its fixed point), and the
information gain of every line is exact, as in :mod:`adaptcs.models.line_spike_slab`.

Prior variance of ``a`` at y-scale s in column x: ``v * p_s * w_x``, ``p_s`` the y-scale profile of training
magnitudes (or flat), ``w_x`` the column's share of the low-resolution image's energy (plus a floor), ``v`` learned
by maximum evidence. Units as in :mod:`adaptcs.models.line_spike_slab` (noise variance per complex sample).

How far the phase is trusted: ``eps_x``, one per column of pixels, from :data:`EPS_GRID` up to 1. At ``eps_x = 1``
the column's prior is circular (the real and imaginary parts of ``exp(-i phi) x`` alike: no pseudo-covariance, so a
line says nothing of its conjugate partner, as in a phase-blind model); near 0 the column is real up to the
estimated phase. The band lines cannot judge the phase that was estimated from them (the zero-filled band image is
exactly real once demodulated), so ``eps_x`` maximises the evidence of the lines *outside* the band given those in
it, column by column: ``log p(z_rest | z_band; v, eps_x)`` (the smallest grid value within :func:`eps_tolerance`
nats of the largest). With no line outside the band there is nothing to judge
by and every column starts at the grid's smallest value; a design loop learns ``v`` and ``eps_x`` again after every
line, so lines on both sides of the centre that disagree with the phase raise it, and the
design then measures both sides where the phase is uncertain and one side where it is known. A fit that is read
learns ``v`` (full evidence) and ``eps_x`` (that conditional evidence) in turn until ``eps_x`` stops changing.
"""

from __future__ import annotations

import time
from numbers import Integral, Real

import numpy as np
import pywt
from scipy.linalg import lapack
from scipy.optimize import minimize_scalar
from sklearn.utils._param_validation import Interval

from adaptcs.bases.separable import SeparableWavelet, centre_lines, centred_dft, zero_filled
from adaptcs.models._base import with_blas_limit
from adaptcs.models._line_gaussian import (
    checked_candidates,
    errors_after_lines,
    means_after_lines,
)
from adaptcs.models._line_model import LineModel, check_averages
from adaptcs.models._spectral import spectral_weights

#: The imaginary part's variance over the real part's, per column, chosen by the evidence of the lines outside the
#: phase band (module docstring); 1 is the phase-blind limit.
EPS_GRID = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)
#: A column keeps the smallest eps whose conditional evidence is within ``eps_tolerance(k)`` nats of the best, ``k``
#: the lines outside the band: at least EPS_TOLERANCE (a Bayes factor below e^2 = 7.4 is no reason to distrust the
#: phase), and EPS_TOLERANCE_PER_LINE per line judged once there are more (the evidence of k lines sums 2 k nx
#: numbers: it grows more certain with k and tells apart phase errors too small to cost the magnitude anything).
#: Chosen on the 8 training slices at 128 x 128, three phase regimes (docs/mri.md): a fixed 2 nats left the design
#: 0.20 dB below partial Fourier 6/8 at R = 4 under a spin-echo phase, a fixed 4 put it 0.53 dB below low-to-high
#: at R = 8 under a gradient-echo one; the per-line rule (0.3) gave +0.24 and -0.09.
EPS_TOLERANCE = 2.0
EPS_TOLERANCE_PER_LINE = 0.3
LEARN_ROUNDS = 4  # alternations of v and eps_x in a fit that is read (they settle in 2-3)
COLUMN_FLOOR = 0.02  # added to every column's energy share: no column is assumed empty
LOG_V_SPAN = 12.0  # v is searched within exp(+-span) of its moment estimate


def eps_tolerance(n_outside: int) -> float:
    """Nats within which a column's conditional evidence counts as the best, with ``n_outside`` lines outside the
    phase band: ``max(EPS_TOLERANCE, EPS_TOLERANCE_PER_LINE * n_outside)``."""
    return max(EPS_TOLERANCE, EPS_TOLERANCE_PER_LINE * n_outside)


def magnitude_profile(wavelet: str, level: int, magnitudes) -> np.ndarray:
    """Second moment of the y-wavelet coefficients of training magnitudes per y-scale, relative to its mean over the
    coefficients: shape (level + 1,)."""
    magnitudes = np.asarray(magnitudes, dtype=np.float64)
    ny, nx = magnitudes.shape[1:]
    basis = SeparableWavelet((ny, nx), wavelet, level)
    coef = np.einsum("ij,kjx->kix", basis.Wy, magnitudes)
    moment = np.array([np.mean(coef[:, basis.scale_y == s, :] ** 2) for s in range(level + 1)])
    if not np.all(moment > 0):
        raise ValueError("the training magnitudes have no energy at some y-scale: no profile")
    return moment / float(np.mean(moment[basis.scale_y]))


def solve_lower(chol: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``L^{-1} rhs`` for a stack of lower-triangular ``L``: ``chol`` (n, r, r), ``rhs`` (n, r) or (n, r, c).

    One LAPACK ``trtrs`` per matrix, each handed ``L^T`` as the Fortran-ordered upper factor it already is in memory
    (no copy, no per-call validation: scipy's batched ``solve_triangular`` spent more time checking than solving)."""
    out = np.empty(rhs.shape)
    for i in range(chol.shape[0]):
        out[i], info = lapack.dtrtrs(chol[i].T, rhs[i], lower=0, trans=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"triangular solve failed (LAPACK info {info})")
    return out


class PhaseLineGaussian(LineModel):
    """The phase-aware Gaussian line model (module docstring), a :class:`~adaptcs.models._line_model.LineModel`.

    Parameters
    ----------
    basis : SeparableWavelet
        Only its y-wavelet is used (columns are pixels along x).
    noise_var : float
        Noise variance per complex k-space sample.
    profile : ndarray, shape (level + 1,), optional
        Relative variances per y-scale (:func:`magnitude_profile` of training magnitudes); None: all equal.
    band : int, optional
        The central lines the phase is estimated from (those of them measured); default ny / 16.
    eps : float in (0, 1], optional
        Every column's imaginary share held at this value instead of learned (None, the default): 1 is the
        phase-blind end of the model (a circular prior, no pseudo-covariance: a line tells nothing of its conjugate
        partner that it would not tell of any other line), small values trust the phase everywhere.

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.mri.data import colin27_kspace
    >>> from adaptcs.bases.separable import centre_lines
    >>> from adaptcs.bases.separable import SeparableWavelet
    >>> from adaptcs.models.line_phase import PhaseLineGaussian
    >>> acq = colin27_kspace(32)[0]  # a simulated 32 x 32 slice with a smooth phase
    >>> lines = centre_lines(32, 8)
    >>> model = PhaseLineGaussian(SeparableWavelet((32, 32), "db2", 2), noise_var=acq.noise_var)
    >>> model = model.fit(acq.kspace[lines], lines)  # exact: always at its fixed point
    >>> model.converged_, model.image_.shape
    (True, (32, 32))
    >>> gains = model.line_gains()
    >>> bool(gains[lines].max() < gains.max())
    True
    """

    #: Warm refits learn ``v`` and ``eps_x`` again from the last fit's ``eps_x``, at most two rounds (each an
    #: eigendecomposition per column and one evidence per grid value); a design loop refits from scratch where a fit
    #: is read (:meth:`adaptcs.design.CandidateDesigner.converge`).
    relearn_when_read = True
    _posterior_attributes = ("_post", "_state", "_rows", "_rows_key", "_row_power")

    _parameter_constraints = {
        "basis": [SeparableWavelet],
        "noise_var": [Interval(Real, 0, None, closed="neither")],
        "profile": ["array-like", None],
        "band": [Interval(Integral, 1, None, closed="left"), None],
        "eps": [Interval(Real, 0, 1, closed="right"), None],
    }

    def __init__(self, basis: SeparableWavelet, *, noise_var: float, profile=None, band: int | None = None,
                 eps: float | None = None):
        if not noise_var > 0.0 or not np.isfinite(noise_var):
            raise ValueError(f"noise_var must be positive and finite; got {noise_var}")
        self.basis, self.noise_var, self.profile, self.band, self.eps = basis, noise_var, profile, band, eps
        ny, nx = basis.shape
        self._profile = np.ones(basis.level + 1) if profile is None else np.asarray(profile, dtype=np.float64)
        if self._profile.shape != (basis.level + 1,) or not np.all(self._profile > 0):
            raise ValueError(f"profile must hold {basis.level + 1} positive values (one per y-scale)")
        self._band = centre_lines(ny, max(1, ny // 16) if band is None else int(band))
        self._Fx_conj = np.conj(centred_dft(nx))
        self._rows_key = None  # the band lines the phase (and so the rows) came from
        self._rows = None  # (nx, ny, ny) complex: row ky of column x's matrix F_y P_x W_y^T
        self._state = None  # (v, eps) of the last fit
        self._post = None

    # --- the operator --------------------------------------------------------------------------------------------

    def _prepare(self, kspace_lines: np.ndarray, lines: np.ndarray) -> None:
        """Estimate the phase from the measured band lines and build every column's candidate rows (cached while
        those lines stay the same)."""
        in_band = np.isin(lines, self._band)
        key = tuple(sorted(lines[in_band].tolist()))
        if key == self._rows_key:
            return
        ny, nx = self.basis.shape
        if key:
            image = zero_filled(kspace_lines[in_band], lines[in_band], (ny, nx))
            self.phase_ = np.angle(image)  # (ny, nx)
            energy = np.mean(np.abs(image) ** 2, axis=0)
            self.column_weight_ = energy / energy.mean() + COLUMN_FLOOR  # (nx,)
        elif self.eps == 1.0:  # phase-blind: the phase does not matter, and no column is told apart from the others
            self.phase_, self.column_weight_ = np.zeros((ny, nx)), np.full(nx, 1.0 + COLUMN_FLOOR)
        else:
            raise ValueError(f"no line of the central band ({self._band[0]}..{self._band[-1]}) is measured: the phase "
                             "cannot be estimated; measure the centre lines first (or fit the phase-blind end, "
                             "eps=1)")
        modulated = np.exp(1j * self.phase_).T[:, :, None] * self.basis.Wy.T[None, :, :]  # (nx, ny, ny): P_x W_y^T
        self._rows = np.matmul(centred_dft(ny)[None], modulated)  # (nx, ny, ny)
        # Every row's prior power at v = 1 and unit column weight, sum_j p_j (Re M)^2, (Im M)^2, Re M Im M: (nx, ny)
        shape_y = self._profile[self.basis.scale_y]
        re, im = self._rows.real, self._rows.imag
        self._row_power = tuple(np.einsum("xkj,xkj,j->xk", a, b, shape_y) for a, b in ((re, re), (im, im), (re, im)))
        self._rows_key = key

    def _real_rows(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Real-form rows of lines ``index`` in every column: (nx, k, 2ny) for the real and the imaginary part."""
        M = self._rows[:, index, :]
        return np.concatenate([M.real, -M.imag], axis=2), np.concatenate([M.imag, M.real], axis=2)

    # --- fitting -------------------------------------------------------------------------------------------------

    @with_blas_limit
    def fit(self, kspace_lines: np.ndarray, lines, *, warm: bool = False, averages=None) -> PhaseLineGaussian:
        """The exact posterior on the measured lines; ``v`` and every column's ``eps_x`` learned (module docstring;
        ``warm``: from the last fit's ``eps_x``, at most two rounds, as a design loop's refits between read fits
        do). The columns' ``eps_x`` are left in ``eps_`` (nx,). ``averages`` (m,): how many readouts each line's
        values average (a line measured again; default 1 each), its noise variance ``noise_var / averages``.

        Returns self, with the fitted attributes of :class:`~adaptcs.models._line_model.LineModel`: ``coef_``
        (ny, nx) are the y-wavelet coefficients of the phase-corrected image ``exp(-i phi) x``, column by column of
        pixels (not separable wavelet coefficients), ``image_`` the posterior mean image, ``v0_`` the slab variance
        per y-scale and ``p0_`` ones (no spike); always converged."""
        started = time.process_time()
        self._validate_params()
        lines = np.asarray(lines, dtype=np.intp)
        kspace_lines = np.asarray(kspace_lines)
        ny, nx = self.basis.shape
        if kspace_lines.shape != (lines.shape[0], nx) or not np.all(np.isfinite(kspace_lines)):
            raise ValueError(f"kspace_lines must be finite with shape ({lines.shape[0]}, {nx})")
        if np.unique(lines).shape[0] != lines.shape[0] or np.any((lines < 0) | (lines >= ny)):
            raise ValueError(f"lines must be distinct rows of the centred k-space, 0..{ny - 1}")
        weight = np.sqrt(check_averages(averages, lines.shape[0]))  # whitens a line that averages readouts
        self._prepare(kspace_lines, lines)
        z, R = self._column_data(kspace_lines, lines, weight)
        s = self.noise_var / 2.0
        shape = np.concatenate([self._profile[self.basis.scale_y]] * 2)  # (2ny,)
        grams = self._grams(R, shape)
        band_rows = self._band_rows(lines)
        if self.eps is not None:  # the trust given: only v is learned
            eps = np.full(nx, float(self.eps))
            v = self._best_v(self._spectra(grams, z, eps), z, s)
        elif warm and self._state is not None:  # from the last fit's values: one or two rounds
            v, eps = self._learn(grams, z, s, band_rows, start=self._state[1], rounds=2)
        else:
            v, eps = self._learn(grams, z, s, band_rows)
        evidence, post = self._posterior(R, z, s, v, eps, shape, grams)
        evidence += 2.0 * nx * float(np.sum(np.log(weight)))  # of the values given, not of the whitened ones
        self._state, self._post = (v, eps), post
        coef = post["mean"][:, :ny].T + 1j * post["mean"][:, ny:].T  # (ny, nx): y-wavelet coefficients per column
        image = np.exp(1j * self.phase_) * (self.basis.Wy.T @ coef)
        self.eps_ = eps
        self._set_fitted(coef=coef, image=image, p0=np.ones(self._profile.shape[0]), v0=v * self._profile,
                         converged=True, residual=0.0, log_evidence=evidence, n_iter=0, started=started)
        return self

    def _column_data(self, kspace_lines: np.ndarray, lines: np.ndarray, weight: np.ndarray):
        """Every column's data and rows in real form, each line weighted by ``weight`` (m,) (sqrt of its readouts
        averaged): ``z`` (nx, 2m), the lines transformed along the readout (real parts, then imaginary parts), and
        ``R`` (nx, 2m, 2ny). Needs :meth:`_prepare` for these band lines first."""
        hybrid = (kspace_lines @ self._Fx_conj) * weight[:, None]  # (m, nx)
        z = np.concatenate([hybrid.real, hybrid.imag], axis=0).T
        R = np.concatenate([part * weight[None, :, None] for part in self._real_rows(lines)], axis=1)
        return z, R

    def _prior_var(self, v: float, eps: np.ndarray, shape: np.ndarray) -> np.ndarray:
        """(nx, 2ny): the prior variances of every column's real and imaginary parts (``eps`` of shape (nx,))."""
        ny, nx = self.basis.shape
        scale = np.ones((nx, 2 * ny))
        scale[:, ny:] = np.broadcast_to(np.asarray(eps, dtype=np.float64), (nx,))[:, None]
        return v * self.column_weight_[:, None] * shape[None, :] * scale

    def _posterior(self, R, z, s, v, eps, shape, grams=None) -> tuple[float, dict]:
        """Evidence and posterior (mean, whitened factor, prior variances) at ``v``, ``eps``; the data covariance
        from ``grams`` (:meth:`_grams`) when given, else from ``R``."""
        lam = self._prior_var(v, eps, shape)  # (nx, 2ny)
        if grams is None:
            scaled = R * np.sqrt(lam)[:, None, :]
            K = np.matmul(scaled, scaled.transpose(0, 2, 1))
        else:
            eps_x = np.broadcast_to(np.asarray(eps, dtype=np.float64), (lam.shape[0],))
            K = v * (grams[0] + eps_x[:, None, None] * grams[1])
        K[:, np.arange(K.shape[1]), np.arange(K.shape[1])] += s
        chol = np.linalg.cholesky(K)
        white = solve_lower(chol, z)  # C^{-1} z, (nx, 2m)
        factor = solve_lower(chol, R * lam[:, None, :])  # G = C^{-1} R Lambda, (nx, 2m, 2ny)
        mean = np.einsum("xrb,xr->xb", factor, white)
        log_det = 2.0 * np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2)))
        evidence = -0.5 * (np.sum(white * white) + log_det + z.size * np.log(2 * np.pi))
        return float(evidence), {"mean": mean, "factor": factor, "prior_var": lam}

    def _grams(self, R: np.ndarray, shape: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every column's data covariance in two parts, ``K_x(v, eps) = v (G_a + eps G_b) + s I``: ``G_a`` from the
        real part ``a`` and ``G_b`` from the imaginary part ``b`` at ``v = 1`` (each (nx, 2m, 2m))."""
        ny = self.basis.shape[0]
        lam = self._prior_var(1.0, 1.0, shape)  # (nx, 2ny)
        scaled = R * np.sqrt(lam)[:, None, :]
        real, imag = scaled[:, :, :ny], scaled[:, :, ny:]
        return np.matmul(real, real.transpose(0, 2, 1)), np.matmul(imag, imag.transpose(0, 2, 1))

    def _band_rows(self, lines: np.ndarray) -> np.ndarray:
        """The real rows (of the 2m: real parts of the m lines, then their imaginary parts) of the band lines."""
        in_band = np.isin(lines, self._band)
        return np.concatenate([np.flatnonzero(in_band), lines.shape[0] + np.flatnonzero(in_band)])

    @staticmethod
    def _column_evidence(K: np.ndarray, z: np.ndarray, s: float) -> np.ndarray:
        """Gaussian log density of every column's data ``z`` (nx, r) under covariance ``K`` (nx, r, r), every
        eigenvalue of which is at least ``s`` (the noise): (nx,).

        One batched Cholesky of the bordered matrix ``[[K, z], [z^T, |z|^2 / s + 1]]`` (positive definite, as
        ``z^T K^{-1} z <= |z|^2 / s``) gives both ``L`` and, as its last row, ``L^{-1} z``."""
        nx, r = z.shape
        bordered = np.empty((nx, r + 1, r + 1))
        bordered[:, :r, :r] = K
        bordered[:, r, :r] = z
        bordered[:, :r, r] = z
        bordered[:, r, r] = np.sum(z * z, axis=1) / s + 1.0
        chol = np.linalg.cholesky(bordered)
        white = chol[:, r, :r]
        log_det = 2.0 * np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2)[:, :r]), axis=1)
        return -0.5 * (np.sum(white * white, axis=1) + log_det + r * np.log(2 * np.pi))

    def _best_eps(self, grams, z: np.ndarray, s: float, v: float, band_rows: np.ndarray) -> np.ndarray:
        """Per column, the smallest ``eps`` of :data:`EPS_GRID` whose evidence of the lines outside the band given
        those in it, at ``v``, is within :func:`eps_tolerance` nats of the largest; the grid's smallest value where
        no line lies outside the band. Shape (nx,)."""
        G_a, G_b = grams
        nx, r = z.shape
        if band_rows.shape[0] == r:
            return np.full(nx, EPS_GRID[0])
        eye = s * np.eye(r)
        band = np.ix_(band_rows, band_rows)
        scores = []
        for eps in EPS_GRID:
            K = v * (G_a + eps * G_b) + eye
            score = self._column_evidence(K, z, s)
            if band_rows.shape[0]:
                score = score - self._column_evidence(K[(slice(None), *band)], z[:, band_rows], s)
            scores.append(score)
        scores = np.array(scores)  # (grid, nx)
        near_best = scores >= scores.max(axis=0) - eps_tolerance((r - band_rows.shape[0]) // 2)
        return np.asarray(EPS_GRID)[np.argmax(near_best, axis=0)]  # the first (smallest) eps near the best

    @staticmethod
    def _spectra(grams, z: np.ndarray, eps: np.ndarray, cache: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every column's ``G_a + eps_x G_b = U diag(w) U^T``, as ``w`` and ``|U^T z|^2`` (each (nx, 2m)); with a
        ``cache`` of an earlier call on the same Grams, only the columns whose ``eps_x`` changed are decomposed
        (:func:`~._spectral.spectral_weights`, without forming ``U``)."""
        G_a, G_b = grams
        if cache and "eps" in cache:
            todo = np.flatnonzero(cache["eps"] != eps)
            w, rotated = cache["w"].copy(), cache["rotated"].copy()
        else:
            todo = np.arange(z.shape[0])
            w, rotated = np.empty(z.shape), np.empty(z.shape)
        if todo.shape[0]:
            values, rotated[todo] = spectral_weights(G_a[todo] + eps[todo, None, None] * G_b[todo], z[todo])
            w[todo] = np.maximum(values, 0.0)
        if cache is not None:
            cache.update(eps=eps.copy(), w=w, rotated=rotated)
        return w, rotated

    @staticmethod
    def _best_v(spectra, z: np.ndarray, s: float) -> float:
        """``v`` of largest evidence given the columns' :meth:`_spectra` ``(w, |U^T z|^2)``: the evidence at any v is
        ``-1/2 sum (|U^T z|^2 / (v w + s) + log(v w + s))`` + const, O(nx m) per evaluation of a bounded search on
        log v around its moment estimate."""
        w, rotated = spectra

        def neg_evidence(t):
            total = np.exp(t) * w + s
            return 0.5 * float(np.sum(rotated / total + np.log(total)))

        power = float(np.mean(w))
        start = max(float(np.mean(z * z)) - s, 1e-3 * float(np.mean(z * z))) / max(power, 1e-300)
        result = minimize_scalar(neg_evidence, bounds=(np.log(start) - LOG_V_SPAN, np.log(start) + LOG_V_SPAN),
                                 method="bounded", options={"xatol": 1e-4})
        return float(np.exp(result.x))

    def _learn(self, grams, z: np.ndarray, s: float, band_rows: np.ndarray, start: np.ndarray | None = None,
               rounds: int = LEARN_ROUNDS) -> tuple[float, np.ndarray]:
        """``v`` by the full evidence and ``eps_x`` by the conditional one (:meth:`_best_eps`), in turn from
        ``start`` (default: the grid's smallest ``eps``), until ``eps_x`` stops changing (at most ``rounds``)."""
        eps = np.full(z.shape[0], EPS_GRID[0]) if start is None else np.asarray(start, dtype=np.float64)
        cache = {}
        for _ in range(rounds):
            v = self._best_v(self._spectra(grams, z, eps, cache), z, s)
            new = self._best_eps(grams, z, s, v, band_rows)
            if np.array_equal(new, eps):
                break
            eps = new
        else:
            v = self._best_v(self._spectra(grams, z, eps, cache), z, s)
        return v, eps

    # --- design --------------------------------------------------------------------------------------------------

    @with_blas_limit
    def line_gains(self, candidates=None) -> np.ndarray:
        """Exact information gain (nats) of each candidate line under the last fit:
        ``sum_x 1/2 log det(I_2 + B_x V_x B_x^T / s)``."""
        self._check_posterior("ask for line gains")
        ny = self.basis.shape[0]
        candidates = np.arange(ny) if candidates is None else np.atleast_1d(np.asarray(candidates, dtype=np.intp))
        G = self._whitened_rows()[:, :, candidates]  # (nx, r, k): G R1^T + i G R2^T for every candidate
        v, eps = self._state
        weight = v * self.column_weight_[:, None]  # (nx, 1)
        eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), self.column_weight_.shape)[:, None]
        power_re, power_im, power_ri = (p[:, candidates] for p in self._row_power)
        q11 = weight * (power_re + eps * power_im) - np.sum(G.real ** 2, axis=1)  # B1 V B1^T, (nx, k)
        q22 = weight * (power_im + eps * power_re) - np.sum(G.imag ** 2, axis=1)
        q12 = weight * (1.0 - eps) * power_ri - np.sum(G.real * G.imag, axis=1)
        s = self.noise_var / 2.0
        return 0.5 * np.sum(np.log((1.0 + q11 / s) * (1.0 + q22 / s) - (q12 / s) ** 2), axis=0)

    def _whitened_rows(self) -> np.ndarray:
        """The whitened factor times every line's row, ``(G_a + i G_b) M_x^T`` per column, by transforms instead of
        products with the (ny, ny) rows: ``M_x = F_y diag(exp(i phi_x)) W_y^T``, so ``M_x P^T`` is the centred FFT
        of the phased wavelet synthesis of ``P``'s rows, O(nx r ny log ny). Shape (nx, r, ny), the last axis ky."""
        ny = self.basis.shape[0]
        factor = self._post["factor"]
        coef = factor[:, :, :ny] + 1j * factor[:, :, ny:]  # (nx, r, ny): y-wavelet coefficients of every row
        sizes = np.bincount(self.basis.scale_y)
        image = pywt.waverec(np.split(coef, np.cumsum(sizes)[:-1], axis=2), self.basis.wavelet,
                             mode="periodization", axis=2)
        image *= np.exp(1j * self.phase_).T[:, None, :]
        return np.fft.fftshift(np.fft.fft(np.fft.ifftshift(image, axes=2), axis=2, norm="ortho"), axes=2)

    @with_blas_limit
    def errors_after_line(self, candidates, kspace_candidates: np.ndarray, image: np.ndarray,
                          chunk: int = 16) -> np.ndarray:
        """Squared error of the posterior mean image after measuring each candidate line with the given values, one
        exact Gaussian update of the last fit (``v``, ``eps`` and the phase kept): what a greedy oracle that knows
        the image minimises (:func:`adaptcs.models._line_gaussian.errors_after_lines`).

        Parameters
        ----------
        candidates : array-like of int, shape (k,)
            Rows of the centred k-space not yet measured.
        kspace_candidates : ndarray of complex, shape (k, nx)
            Their values.
        image : ndarray of complex, shape (ny, nx)
            The true image.
        chunk : int
            Candidates per stacked product.

        Returns
        -------
        ndarray, shape (k,)
            The image's squared l2 error (the phase and the y-wavelet are unitary), in the k-space data's units.
        """
        self._check_posterior("ask for errors after a line")
        ny, nx = self.basis.shape
        candidates, kspace_candidates = checked_candidates(candidates, kspace_candidates, (ny, nx), image)
        coef = self.basis.Wy @ (np.exp(-1j * self.phase_) * np.asarray(image))  # (ny, nx), this model's unknowns
        truth = np.concatenate([coef.real, coef.imag], axis=0).T  # (nx, 2ny)
        values = kspace_candidates @ self._Fx_conj  # (k, nx): each line transformed along the readout
        out = np.empty(candidates.shape[0])
        for lo in range(0, candidates.shape[0], chunk):
            idx = slice(lo, lo + chunk)
            R1, R2 = self._real_rows(candidates[idx])
            out[idx] = errors_after_lines(self._post["mean"], truth, self._post["factor"], self._post["prior_var"],
                                          R1, R2, values[idx], self.noise_var / 2.0)
        return out

    @with_blas_limit
    def images_after_line(self, candidates, kspace_candidates: np.ndarray) -> np.ndarray:
        """The posterior mean image after measuring each candidate line alone with the given values (one exact
        Gaussian update of the last fit, as :meth:`errors_after_line`): shape (k, ny, nx), complex."""
        self._check_posterior("ask for images after a line")
        ny, nx = self.basis.shape
        candidates, kspace_candidates = checked_candidates(candidates, kspace_candidates, (ny, nx))
        R1, R2 = self._real_rows(candidates)
        new = means_after_lines(self._post["mean"], self._post["factor"], self._post["prior_var"], R1, R2,
                                kspace_candidates @ self._Fx_conj, self.noise_var / 2.0)  # (nx, 2ny, k)
        coef = new[:, :ny, :] + 1j * new[:, ny:, :]  # (nx, ny, k): y-wavelet coefficients per column
        images = np.einsum("ij,xjk->kix", self.basis.Wy.T, coef)  # (k, ny, nx)
        return np.exp(1j * self.phase_)[None] * images
