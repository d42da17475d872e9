"""The phase-aware line model with the project's own sparse prior: group spike-and-slab by EP on the y-wavelet
coefficients of the phase-corrected image, column by column of pixels.

:class:`adaptcs.models.line_phase.PhaseLineGaussian` estimates the image's phase from the central lines, learns how
far to trust it per column (``eps_x``) and puts a Gaussian prior on the y-wavelet coefficients ``a + i b`` of
``exp(-i phi) x`` along every column of pixels. Its design depends on the values measured only through the phase, a
scale and the trust: a calibrated fixed mask. Here the same unknowns get a spike-and-slab prior, fitted by EP
(:mod:`adaptcs.models._ep`), whose posterior variances depend on the values measured: a coefficient EP finds "off"
has a small variance, and the lines that would measure it are worth less (Seeger et al., MRM 2010, with a sparse
prior of another kind).

Per coefficient ``i`` of column ``x``: ``a`` ~ ``p N(0, v0 p_s w_x) + (1 - p) delta_0`` and ``b`` the same with
``eps_x`` times the variance, ``a`` and ``b`` in one group (one spike: the magnitude's coefficient is there or not,
its phase error with it); with ``groups="block"`` the groups are 2 x 2 blocks of one subband (coefficients ``i``,
``i + 1`` of one y-scale in columns ``x``, ``x + 1``: 8 real numbers), as the camera's tree prior groups space. The
coarsest y-scale is always on (a Gaussian prior). One spike probability per detail y-scale and one slab variance
``v0`` (times the profile ``p_s`` and the column weight ``w_x``) are learned by type-II maximum likelihood; ``p_s``,
``w_x``, the phase and ``eps_x`` are the Gaussian model's, fitted first on the same lines. The sites are
diagonal, so a group across two columns couples them only in EP's group update: the Gaussian posterior stays
exactly block diagonal over the columns (:class:`adaptcs.models._blocks.BlockRows`, column x measured by
``S F_y diag(exp(i phi_x)) W_y^T``), O(nx (2m)^2 2ny) per EP iteration, and the information gain of every line
under EP's Gaussian is exact.

Units as in :mod:`adaptcs.models.line_phase` (noise variance per complex sample).
"""

from __future__ import annotations

import time
from numbers import Real

import numpy as np
from scipy.special import expit, logit
from sklearn.utils._param_validation import Interval, StrOptions

from adaptcs.bases.separable import SeparableWavelet
from adaptcs.models._base import with_blas_limit
from adaptcs.models._blocks import BlockRows
from adaptcs.models._ep import EPProblem, Hyper, warn_not_converged
from adaptcs.models._ep_fallback import stable_ep
from adaptcs.models._line_ep import EP_CONSTRAINTS, fit_lines_ep, fit_outcome
from adaptcs.models._line_model import check_averages
from adaptcs.models._scaling import power_of_two_scale
from adaptcs.models.line_phase import PhaseLineGaussian

GROUPINGS = ("coefficient", "block")
LEARN = ("p0", "v0")


def line_groups(scale_y: np.ndarray, nx: int, grouping: str) -> tuple[np.ndarray, np.ndarray]:
    """The group of every real unknown and the prior class of every group.

    Parameters
    ----------
    scale_y : ndarray of int, shape (ny,)
        The y-scale of every y-wavelet coefficient (0: the coarsest, always on).
    nx : int
        Columns of pixels.
    grouping : {"coefficient", "block"}
        One group per complex coefficient (its real and imaginary part), or per 2 x 2 block of one subband
        (coefficients ``2k``, ``2k + 1`` of columns ``2j``, ``2j + 1``).

    Returns
    -------
    coef_group : ndarray of int, shape (nx * 2 ny,)
        Unknowns laid out column after column, each column ``[a_0..a_{ny-1}, b_0..b_{ny-1}]``.
    group_class : ndarray of int, shape (G,)
        ``scale - 1`` of the group's y-scale, -1 for the coarsest (always on).
    """
    ny = scale_y.shape[0]
    if grouping == "coefficient":
        group = np.arange(nx)[:, None] * ny + np.arange(ny)[None, :]  # (nx, ny)
        group_scale = scale_y[np.arange(nx * ny) % ny]
    else:
        starts = np.flatnonzero(np.diff(scale_y, prepend=-1))
        sizes = np.diff(np.append(starts, ny))
        if nx % 2 or np.any(starts % 2) or np.any(sizes % 2):
            raise ValueError(f"groups='block' needs an even number of columns and subbands of even size; got nx={nx} "
                             f"and subbands of {sizes.tolist()} coefficients (use a lower level, or 'coefficient')")
        half = ny // 2
        group = (np.arange(nx)[:, None] // 2) * half + np.arange(ny)[None, :] // 2
        group_scale = scale_y[2 * (np.arange((nx // 2) * half) % half)]
    coef_group = np.concatenate([group, group], axis=1).ravel()
    return coef_group, np.where(group_scale == 0, -1, group_scale - 1)


class PhaseLineSpikeSlab(PhaseLineGaussian):
    """Spike-and-slab by EP on the phase-corrected image's y-wavelet coefficients (module docstring), a line model
    (:class:`~adaptcs.models._line_model.LineModel`) with the phase, trust and profile of
    :class:`~adaptcs.models.line_phase.PhaseLineGaussian`.

    Parameters
    ----------
    basis : SeparableWavelet
        Only its y-wavelet is used (columns are pixels along x).
    noise_var : float
        Noise variance per complex k-space sample (given, not learned).
    profile : ndarray, shape (level + 1,), optional
        Relative slab variances per y-scale (:func:`adaptcs.models.line_phase.magnitude_profile`); None: flat.
    band : int, optional
        The central lines the phase is estimated from; default ny / 16.
    eps : float in (0, 1], optional
        Every column's imaginary share held at this value (None: learned per column by the Gaussian model).
    p0 : float
        Starting spike probability of every detail y-scale (learned with ``"p0"`` in ``learn``).
    groups : {"coefficient", "block"}
        One complex coefficient per group (the default), or 2 x 2 blocks of one subband (EP with learning stops
        short of its fixed point more often with them: docs/mri.md).
    learn : tuple of str
        Any of "p0", "v0": learned in every fit from scratch; warm refits learn nothing by EP (``v0`` follows the
        Gaussian scale, see ``v0_follows_gaussian``; ``relearn_growth`` sends some of them back to scratch).
    v0_follows_gaussian : bool
        In warm refits ``v0`` follows the Gaussian model's scale ``v`` (learned exactly, and cheaply, at every
        refit): ``v0 = kappa v / p0``, ``kappa`` the ratio of the two that the last fit that learned ``v0`` found
        (0.57-0.79 on 8 to 32 lines of 128 x 128 slices under spin-echo and gradient-echo phases, while ``v0``
        itself grew 4 to 10 fold: docs/log/mri.md); False: ``v0`` held where the last fit that learned it left it.
        Only with "v0" in ``learn``.
    relearn_growth : float > 1 or None
        A warm refit learns ``learn`` again, from scratch, once the lines have grown by this factor since the values
        were last learned (not to the strict test: it only chooses the next line); None: only fits from scratch
        learn. Values learned on the first lines alone are too small for the later ones, and a design that holds
        them chooses worse lines (docs/log/mri.md, "Relearning v0 during the design").
    warm_tol : float or None
        EP's tolerance in the warm refits of a design loop, which only choose the next line (None, the default:
        ``tol``); a fit that is read is always taken to ``tol``. At 1e-3 a design costs 0.86-0.90 of its CPU at 128 x
        128 (medians over 8 slices in each phase regime) and 0.93 on a 256 x 256 slice, with the same lines on 23
        of 24 slices at 128 (docs/log/mri.md, "Fallback, CPU and the susceptibility regime"): not the default while
        the benchmark's tables are those of ``tol``.
    tol, max_iter, damping, damping_decay, v_inf_ratio
        EP's settings, as in :class:`adaptcs.models.GroupSpikeSlabEP`; a run whose parallel update circles its fixed
        point goes on with the variance-decoupled update, then Anderson-accelerated EP
        (:mod:`adaptcs.models._ep_fallback`).
    dense_rows : bool
        Run EP on the dense rows (O(n^2 d) per iteration): a check of the block path for small problems.

    Examples
    --------
    >>> from adaptcs.mri.data import colin27_kspace
    >>> from adaptcs.bases.separable import SeparableWavelet, centre_lines
    >>> from adaptcs.models.line_phase_sparse import PhaseLineSpikeSlab
    >>> acq = colin27_kspace(32)[0]  # a simulated 32 x 32 slice with a smooth phase
    >>> lines = centre_lines(32, 12)
    >>> model = PhaseLineSpikeSlab(SeparableWavelet((32, 32), "db2", 2), noise_var=acq.noise_var, learn=("v0",))
    >>> model = model.fit(acq.kspace[lines], lines)  # p0 = 0.5 given, v0 learned
    >>> model.converged_, model.image_.shape, model.line_gains().shape
    (True, (32, 32), (32,))
    """

    _posterior_attributes = ("_post", "_state", "_rows", "_rows_key", "_row_power", "_ep_state")
    _parameter_constraints = {
        **PhaseLineGaussian._parameter_constraints,
        "p0": [Interval(Real, 0, 1, closed="neither")],
        "groups": [StrOptions(set(GROUPINGS))],
        "learn": [tuple, list],
        "v0_follows_gaussian": ["boolean"],
        "relearn_growth": [Interval(Real, 1, None, closed="neither"), None],
        "warm_tol": [Interval(Real, 0, None, closed="neither"), None],
        **EP_CONSTRAINTS,
    }

    def __init__(self, basis: SeparableWavelet, *, noise_var: float, profile=None, band: int | None = None,
                 eps: float | None = None, p0: float = 0.5, groups: str = "coefficient", learn=LEARN,
                 v0_follows_gaussian: bool = True, relearn_growth: float | None = None, warm_tol: float | None = None,
                 tol: float = 1e-4, max_iter: int = 1000, damping: float = 0.9, damping_decay: float = 0.99,
                 v_inf_ratio: float = 300.0, dense_rows: bool = False):
        super().__init__(basis, noise_var=noise_var, profile=profile, band=band, eps=eps)
        if not 0.0 < p0 < 1.0:
            raise ValueError(f"p0 must lie in (0, 1); got {p0}")
        unknown = set(learn) - set(LEARN)
        if unknown:
            raise ValueError(f"learn takes {LEARN}; got {sorted(unknown)}")
        self.p0, self.groups, self.learn = float(p0), groups, tuple(name for name in LEARN if name in learn)
        self.v0_follows_gaussian = bool(v0_follows_gaussian)
        self.relearn_growth = None if relearn_growth is None else float(relearn_growth)
        self.tol, self.max_iter = float(tol), int(max_iter)
        self.warm_tol = None if warm_tol is None else float(warm_tol)
        self.damping, self.damping_decay, self.v_inf_ratio = float(damping), float(damping_decay), float(v_inf_ratio)
        self.dense_rows = bool(dense_rows)
        self._coef_group, self._group_class = line_groups(basis.scale_y, basis.shape[1], groups)
        self._ep_state = None  # (sites, hyper, refits) of the last EP fit, unit-size
        self._learned_lines = 0  # lines of the last fit that learned
        self._v0_ratio = None  # v0 / (v / p0) of the last fit that learned v0 (v the Gaussian model's scale)
        self._scale = None

    @with_blas_limit
    def fit(self, kspace_lines: np.ndarray, lines, *, warm: bool = False, averages=None) -> PhaseLineSpikeSlab:
        """The Gaussian phase model's fit on the measured lines (phase, trust ``eps_x``, profile scale), then EP
        with the sparse prior: from scratch to the strict test, learning what ``learn`` names, or ``warm`` from the
        last fit's sites at the values it learned (a design loop's refits; it refits from scratch where a fit is
        read); ``averages`` as in :meth:`PhaseLineGaussian.fit`.

        Returns self, with the fitted attributes of :class:`~adaptcs.models._line_model.LineModel`: ``coef_``
        (ny, nx) the y-wavelet coefficients of ``exp(-i phi) x`` per column, ``p0_`` per y-scale (1 for the
        coarsest), ``v0_`` the slab variance per y-scale at unit column weight, ``converged_`` EP (and learning) at
        the fixed point, ``columns_not_converged_`` the pixel columns still moving if not; ``eps_`` (nx,) the trust
        the Gaussian fit learned; ``learned_lines_`` the line count of the fit that learned the values in use (this
        fit's own when it learned them: from scratch, or a warm refit that ``relearn_growth`` sent back to scratch)."""
        started = time.process_time()
        self._validate_params()
        lines = np.asarray(lines, dtype=np.intp)
        requested_warm = warm
        if warm and self.learn and self.relearn_growth is not None \
                and lines.shape[0] >= self.relearn_growth * self._learned_lines:
            warm = False  # the lines have grown since the values were learned: this refit is a fit from scratch
        super().fit(kspace_lines, lines, warm=warm, averages=averages)  # phase, eps_x, v: the Gaussian model's
        gaussian_v, eps = self._state
        ny, nx = self.basis.shape
        weight = np.sqrt(check_averages(averages, lines.shape[0]))
        z, R = self._column_data(np.asarray(kspace_lines), lines, weight)  # (nx, 2m), (nx, 2m, 2ny)
        if self._scale is None or not warm:
            self._scale = power_of_two_scale(z)
        c = self._scale
        shape_y = self._profile[self.basis.scale_y]
        # (nx, 2ny): the real parts' slab at v0 = 1, the imaginary parts' eps_x times it, times the column's weight
        slab_profile = self.column_weight_[:, None] * np.concatenate([np.tile(shape_y, (nx, 1)),
                                                                      shape_y[None, :] * eps[:, None]], axis=1)
        rows = BlockRows(R)
        problem = EPProblem(rows.dense() if self.dense_rows else rows, z.ravel() / c, self._coef_group,
                            np.zeros(self._group_class.shape[0]), group_class=self._group_class,
                            slab_profile=slab_profile.ravel(), v_inf_ratio=self.v_inf_ratio, damping=self.damping,
                            damping_decay=self.damping_decay, fallback=stable_ep)
        warm_state = self._ep_state if warm and self._ep_state is not None else None
        if warm_state is not None:  # a refit that only chooses the next line: no fallback (docs/mri.md)
            problem.fallback = None
        if warm_state is not None and self.v0_follows_gaussian and self._v0_ratio is not None:
            sites, held, refits = warm_state
            warm_state = (sites, Hyper(held.level, [self._v0_ratio * gaussian_v / self.p0 / c**2], held.noise_var),
                          refits)
        start = None
        if warm_state is None:  # the sparse prior's second moment at the Gaussian's: p0 v0 = v
            level = np.full(problem.n_levels, float(logit(self.p0)))
            start = Hyper(level, [gaussian_v / self.p0 / c**2], self.noise_var / 2.0 / c**2)
        # a warm refit learns nothing by EP (v0 follows the Gaussian model's v, or is held): the design loop refits
        # from scratch (and learns again) where a fit is read (relearn_when_read); tracking the values by EP at every
        # refit cost 4 times the CPU and designed worse lines (docs/log/mri.md, "The sparse design at 128 x 128 with
        # held values"); learning them again from scratch every 1.5 x lines chose lines as good at up to 1.5 times
        # the CPU (docs/log/mri.md, "v0 that follows the lines inside the model")
        learn = self.learn if warm_state is None else ()
        # a warm refit only chooses the next line; a fit from scratch may be read (a design loop reads one that
        # relearned as it is), so it runs to tol
        tol = self.warm_tol if warm_state is not None and self.warm_tol is not None else self.tol
        learned = fit_lines_ep(problem, start, warm_state, learn, tol=tol, max_iter=self.max_iter,
                               strict=not requested_warm)  # a refit that learned again is not read
        run = learned.run
        self._ep_state = (run.sites, learned.hyper, learned.refits)
        if warm_state is None:
            self._learned_lines = lines.shape[0]
            if "v0" in learn:
                self._v0_ratio = float(learned.hyper.v0[0]) * c**2 / (gaussian_v / self.p0)
        self.learned_lines_ = self._learned_lines
        converged, reasons, columns = fit_outcome(problem, learned, learn, tol=tol, max_iter=self.max_iter,
                                                  n_blocks=nx)
        post = run.post
        mean = post.mean.reshape(nx, 2 * ny) * c
        self._post = None if self.dense_rows else {  # EP's Gaussian, in the data's units
            "mean": mean, "factor": post.factor * c, "prior_var": post.block_prior_var * c**2}
        coef = mean[:, :ny].T + 1j * mean[:, ny:].T
        image = np.exp(1j * self.phase_) * (self.basis.Wy.T @ coef)
        p0 = np.ones(self._profile.shape[0])
        p0[1:] = expit(learned.hyper.level)
        log_evidence = run.log_evidence - z.size * np.log(c) + 2.0 * nx * float(np.sum(np.log(weight)))
        self._set_fitted(coef=coef, image=image, p0=p0, v0=learned.hyper.v0[0] * c**2 * self._profile,
                         converged=converged, residual=float(run.residual), log_evidence=float(log_evidence),
                         n_iter=run.n_iter, started=started, reasons=reasons, columns_not_converged=columns)
        if not requested_warm and not converged:
            warn_not_converged(type(self).__name__, reasons + [f"{columns} of {nx} columns stopped short"],
                               stacklevel=3)
        return self

    @with_blas_limit
    def line_gains(self, candidates=None) -> np.ndarray:
        """Exact information gain (nats) of each candidate line under EP's Gaussian:
        ``sum_x 1/2 log det(I_2 + B_x V_x B_x^T / s)``, ``V_x = diag(lam_x) - G_x^T G_x`` with the sites' variances
        ``lam_x``; O(nx ny^2 + nx r ny log ny)."""
        self._check_posterior("ask for line gains")
        if self._post is None:
            raise ValueError("line gains need the block-diagonal path (dense_rows=False)")
        ny = self.basis.shape[0]
        candidates = np.arange(ny) if candidates is None else np.atleast_1d(np.asarray(candidates, dtype=np.intp))
        if candidates.ndim != 1 or np.any((candidates < 0) | (candidates >= ny)):
            raise ValueError(f"candidates must be rows of the centred k-space, 0..{ny - 1}")
        W = self._whitened_rows()[:, :, candidates]  # (nx, r, k)
        M = self._rows[:, candidates, :]  # (nx, k, ny)
        lam = self._post["prior_var"]
        lam_a, lam_b = lam[:, :ny], lam[:, ny:]
        re2, im2, reim = M.real ** 2, M.imag ** 2, M.real * M.imag
        q11 = np.einsum("xkj,xj->xk", re2, lam_a) + np.einsum("xkj,xj->xk", im2, lam_b) - np.sum(W.real ** 2, axis=1)
        q22 = np.einsum("xkj,xj->xk", im2, lam_a) + np.einsum("xkj,xj->xk", re2, lam_b) - np.sum(W.imag ** 2, axis=1)
        q12 = np.einsum("xkj,xj->xk", reim, lam_a - lam_b) - np.sum(W.real * W.imag, axis=1)
        s = self.noise_var / 2.0
        return 0.5 * np.sum(np.log((1.0 + q11 / s) * (1.0 + q22 / s) - (q12 / s) ** 2), axis=0)
