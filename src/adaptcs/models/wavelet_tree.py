"""A hidden Markov tree of group spike-and-slab states over the wavelet quadtree, exact on basis scans.

Prior (Crouse, Nowak & Baraniuk 1998; TSW-CS, He & Carin 2009): each detail coefficient has a state, its parent
the coefficient one level coarser whose support covers it (``states="coefficients"``), or, with E7's groups,
each detail group ``g`` (the four children of one parent coefficient) has a state ``z_g`` and its parent group is
the group of that parent coefficient (``states="groups"``). Either way the states form a quadtree (the coarsest
details are its roots) and are a Markov chain down it, per scale ``s``::

    P(z_g = 1 | z_parent = 1) = p_on[s],   P(z_g = 1 | z_parent = 0) = p_off[s],   P(z_root = 1) = p_on[1]
    c_j | z_g = 1 ~ N(0, v0[s]),   c_j | z_g = 0 ~ N(0, v_small[s]);   approximation ~ N(0, v0[0]), always on.

``v_small = 0`` is an exact spike; natural images are compressible rather than sparse, and a small variance for
the "off" state (Crouse et al.'s two-state mixture) keeps their small details from being explained as noise.

Measurements must each measure one coefficient (``y_i = g_i c_{j(i)} + e_i``, ``e_i ~ N(0, s2)``; a basis scan,
a coefficient may be measured more than once). The likelihood then factorises over coefficients, and the
posterior of the states is exact by sum-product on the tree (an upward and a downward pass, O(d)); the
coefficients given the states are Gaussian in closed form. Hyper-parameters (``p_on``, ``p_off``, ``v0``,
``v_small`` per scale and the noise variance) are learned by exact EM (Baum-Welch on the tree), which increases
the evidence at every step. A fine detail's posterior variance thus depends on its parent's measured value: the spike
probability of the children of a large coefficient rises, that of the children of a negligible one falls.

Other rows (random projections) are not handled here: for them, ``GroupSpikeSlabEP(groups, scales=...,
parents=basis.parents())`` keeps the same tree (with an exact spike) exact inside EP.

Over 500 lines: one estimator whose docstring carries the model and every parameter (a third of the module), and
whose E-step, M-steps and extrapolated EM share the fitted state; the tree's structure and the EM's stateless
pieces are in :mod:`adaptcs.models._tree_em`, the message passing in :mod:`adaptcs.models._hmt`.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from numbers import Integral, Real

import numpy as np
from scipy import sparse
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from adaptcs import _validation as val
from adaptcs.bases.images import WaveletBasis
from adaptcs.models._base import GroupRegressor
from adaptcs.models._hmt import sum_product
from adaptcs.models._tree_em import (
    BETA_PRIOR,
    KAPPA_FLOOR,
    PROBABILITY_BOUNDS,
    STATES,
    WaveletTree,
    _finite,
    _log_prior,
    _Moments,
    _moved,
    _pack,
    _prediction_moved,
    _Scan,
    _slab_floor,
    _slab_share,
    _unpack,
    decay_profile,
)

_LOG_2PI = float(np.log(2.0 * np.pi))
NOISE_FLOOR = 1e-10  # learned noise variance stays above this fraction of the mean squared measurement
LIGHT_FLOOR = 0.1  # noise="photon": no pattern's noise weight below this fraction of the mean (docs/log/results.md)
PREDICTION_INNER = 20  # alternations of the gain, kappa and v0 updates in one M-step (see _m_step)
MAX_JUMP = 5.0  # SQUAREM jumps move no parameter more than this (logit or log units) beyond EM's second step
NOISE_MODELS = ("constant", "photon")
PREDICTION_START = (1.0, 0.5)  # beta and kappa where learning starts: measured on E7's photographs (Haar, 64 x 64:
# least squares of the true details on their predictions gave beta 0.7-1.0 and a residual variance of 0.3-1.2 p^2)


class WaveletTreeSpikeSlab(GroupRegressor):
    """Group spike-and-slab prior with a hidden Markov tree over the wavelet quadtree, exact on basis scans.

    Parameters
    ----------
    basis : WaveletBasis
        The basis whose coefficients are fitted (its scales, parents and groups give the tree).
    states : {"coefficients", "groups"}
        "coefficients" (default): a state per detail coefficient, conditioned on its parent coefficient's, so a
        large coefficient raises the probability of its own four children; "groups": a state per 2 x 2 group of
        siblings (the basis's groups), conditioned on the parent coefficient's group (one state for the children
        of four neighbouring coefficients).
    p_on, p_off : float or array-like of shape (L,)
        ``P(z = 1 | parent on)`` and ``P(z = 1 | parent off)`` per detail scale 1..L (a float: every scale);
        the starting point when learned.
    v0 : float or array-like of shape (L + 1,), optional
        Slab variance per scale 0..L; default from the data (the mean square of each scale's measurements).
    v_small : float or array-like of shape (L + 1,)
        Variance of the "off" state per scale (entry 0 unused); 0 is an exact spike. Learned only if ``learn``
        names it (then a zero start becomes ``v0 / 100``).
    noise_var : float, optional
        Noise variance; default a tenth of the median square of the finest measured details.
    learn : tuple of {"p_on", "p_off", "v0", "v_small", "noise_var"}
        What EM learns (default all but ``v_small``).
    scale_profile : {"decay", "free"}
        How the detail scales' variances are learned: "decay" (default) ``v0[s] = a 2^(-b (s - 1))`` (and
        ``v_small`` likewise) with ``a`` and ``b`` learned, so that scales with few or no measurements follow the
        others (photographs' wavelet energy decays geometrically with scale); "free" one value per scale.
    max_iter : int
        Accelerated EM iterations (SQUAREM: two EM steps and an extrapolation each).
    tol : float
        Converged when, in one iteration, no probability moves by more than ``tol`` and no variance by more than
        ``tol`` in log units.
    warm_start : bool
        Start EM from the previous fit's hyper-parameters.
    prediction : bool
        Let the "on" state of every detail follow the wavelet prediction ``p_j`` of that detail from the coarser
        scales (:func:`adaptcs.bases.prediction.predicted_coefficients` of the posterior mean, the quantity
        the prediction scan of Rousset et al. ranks by): ``c_j | on ~ N(beta[s] p_j, v0[s] + kappa p_j^2)``, so an
        unmeasured detail is predicted rather than zero and its variance grows with its predicted magnitude.
        ``beta`` (per scale; a scale with no measurement takes the next coarser one's) and ``kappa`` (one for
        all scales) are learned by EM whenever anything is learned (start 1 and 0.5, the values measured on
        photographs); ``p`` is recomputed from the posterior mean as EM goes, and a fit is converged only where
        ``p`` no longer moves (a plug-in prior: the prediction is not integrated over the coarser scales'
        uncertainty).
    noise : {"constant", "photon"}
        "constant": one noise variance for every measurement. "photon": the variance of a basis image's value is
        ``noise_var`` times the light it collects, ``|a_j| . x`` (a photon-counting camera showing the pattern
        as its positive and negative parts), relative to its mean over all basis images and at least
        ``LIGHT_FLOOR`` (a tenth) of that mean (a dark pattern still has dark counts and read noise); the light
        is computed from the image of the measured approximation (an unmeasured approximation coefficient counts
        as the mean of the measured ones; the values must be intensities, of positive mean).
    photons : float, optional
        With ``noise="photon"``, a camera whose gain is known: the expected photon count per unit of ``|a_j| . x``
        (in the values' units; values in photon counts: 1). The noise variance of a basis image's value is then
        its light over ``photons`` (with the same floor), and ``noise_var`` is not learned. Default: learned.

    Attributes
    ----------
    coef_ : ndarray, shape (d,)
        Posterior mean.
    coef_var_ : ndarray, shape (d,)
        Posterior marginal variances (what a basis scan's design reads: ``x^T V x`` of basis row ``j``).
    group_prob_ : ndarray, shape (G,)
        ``P(z_g = 1 | y)`` of every state (1 for the approximation's); G = d with ``states="coefficients"``.
    coef_prob_ : ndarray, shape (d,)
        The probability that each coefficient's state is "on" (its entry of ``group_prob_``).
    p_on_, p_off_ : ndarray, shape (L,)
    v0_, v_small_ : ndarray, shape (L + 1,)
    noise_var_ : float
        With ``noise="photon"``, the variance of a measurement that collects the mean light (see
        ``noise_weight_``).
    beta_ : ndarray, shape (L + 1,)
        The prediction's gain per scale (0 without ``prediction``; entry 0 unused).
    kappa_ : float
        The slab variance per unit squared prediction (0 without ``prediction``).
    prediction_ : ndarray, shape (d,)
        The prediction ``p`` of every detail the fit used (0 for the approximation, and without ``prediction``).
    noise_weight_ : ndarray, shape (d,)
        Each basis image's noise variance relative to ``noise_var_`` (ones with ``noise="constant"``).
    log_evidence_ : float
        ``log p(y)`` at the fitted hyper-parameters (given ``prediction_``).
    n_iter_ : int
    converged_ : bool

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.bases.images import make_basis
    >>> from adaptcs.models import WaveletTreeSpikeSlab
    >>> basis = make_basis("haar", 16)
    >>> image = np.zeros((16, 16))
    >>> image[4:12, 6:14] = 1.0                       # a bright square
    >>> c = basis.analyze(image.ravel())
    >>> X = np.eye(basis.d)[:64]                      # a scan of the 64 coarsest basis images
    >>> y = X @ c + np.random.default_rng(0).normal(0.0, 0.01, 64)
    >>> est = WaveletTreeSpikeSlab(basis).fit(X, y)
    >>> est.converged_, est.coef_.shape
    (True, (256,))
    >>> error = np.linalg.norm(basis.synthesize(est.coef_) - image.ravel()) / np.linalg.norm(image)
    >>> bool(error < 0.01)
    True
    """

    _parameter_constraints = {
        "basis": [WaveletBasis],
        "states": [StrOptions(set(STATES))],
        "p_on": [Interval(Real, 0, 1, closed="neither"), "array-like"],
        "p_off": [Interval(Real, 0, 1, closed="neither"), "array-like"],
        "v0": [Interval(Real, 0, None, closed="neither"), "array-like", None],
        "v_small": [Interval(Real, 0, None, closed="left"), "array-like"],
        "noise_var": [Interval(Real, 0, None, closed="neither"), None],
        "learn": [tuple, list],
        "scale_profile": [StrOptions({"decay", "free"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "warm_start": ["boolean"],
        "prediction": ["boolean"],
        "noise": [StrOptions(set(NOISE_MODELS))],
        "photons": [Interval(Real, 0, None, closed="neither"), None],
    }
    LEARNABLE = ("p_on", "p_off", "v0", "v_small", "noise_var")
    accepts_sparse_selection = True  # fit takes a scipy.sparse X (replay_basis_scan passes one)
    # replay_basis_scan's refits between checkpoints take at most this many EM iterations (warm-started, the values
    # go on moving at the next refit): with a small-variance off state EM crawls along the ridge between it and the
    # noise (hundreds of iterations per refit), and those refits only choose the next rows
    replay_tracking_iterations = 10
    # everything fit() sets, and all that a warm-started refit, predict and cov_matvec read: a copy of these (the lab's
    # state file keeps them between commands, adaptcs.lab.rows) is the fitted model
    FITTED_ATTRIBUTES = ("coef_", "coef_var_", "group_prob_", "coef_prob_", "p_on_", "p_off_", "v0_", "v_small_",
                         "noise_var_", "beta_", "kappa_", "prediction_", "noise_weight_", "log_evidence_", "n_iter_",
                         "converged_", "n_features_in_")

    def __init__(self, basis, *, states="coefficients", p_on=0.7, p_off=0.1, v0=None, v_small=0.0, noise_var=None,
                 learn=("p_on", "p_off", "v0", "noise_var"), scale_profile="decay", max_iter=500, tol=1e-4,
                 warm_start=False, prediction=False, noise="constant", photons=None):
        self.basis = basis
        self.states = states
        self.p_on = p_on
        self.p_off = p_off
        self.v0 = v0
        self.v_small = v_small
        self.noise_var = noise_var
        self.learn = learn
        self.scale_profile = scale_profile
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start
        self.prediction = prediction
        self.noise = noise
        self.photons = photons

    # -- data ------------------------------------------------------------------------------------------------
    def _measurements(self, X, y):
        """Per coefficient: the combined value, the summed squared gain G_j, the count and the within-repeat
        residual (sufficient statistics of the selection likelihood). ``X`` may be a scipy.sparse matrix (a large
        scan: a dense selection of a 256 x 256 basis would not fit in memory)."""
        d = self.basis.d
        if sparse.issparse(X):
            X = sparse.csr_array(X, dtype=float)
            X.eliminate_zeros()
            y = np.asarray(y, dtype=float)
            if X.shape[1] != d or y.shape != (X.shape[0],) or not np.all(np.isfinite(y)) \
                    or not np.all(np.isfinite(X.data)):
                raise ValueError(f"X must have {d} columns and one finite value per row; got X {X.shape}, y "
                                 f"{np.shape(y)}")
            if np.any(np.diff(X.indptr) != 1):
                raise ValueError("WaveletTreeSpikeSlab needs rows that each measure one coefficient (a basis scan)")
            columns, gains = X.indices.astype(np.intp), X.data
            self.n_features_in_ = d
            val.check_squares_fit(self, gains, y)
        else:
            X, y = val.check_fit_data(self, X, y)
            val.check_squares_fit(self, X, y)  # the tree works in the data's own units (it returned NaN beyond)
            if X.shape[1] != d:
                raise ValueError(f"X has {X.shape[1]} columns; the basis has {d} coefficients")
            magnitude = np.abs(X)
            columns = magnitude.argmax(axis=1)
            gains = X[np.arange(X.shape[0]), columns]
            # entries below 1e-9 of a row's largest are the round-off of patterns written to files
            # (adaptcs.bases.prediction.single_coefficient_rows)
            if np.any(gains == 0) or np.count_nonzero(magnitude > 1e-9 * np.abs(gains)[:, None]) != X.shape[0]:
                raise ValueError("WaveletTreeSpikeSlab needs rows that each measure one coefficient (a basis scan); "
                                 "for other rows use GroupSpikeSlabEP(groups, scales=basis.scales())")
        G = np.bincount(columns, gains * gains, minlength=d)
        gy = np.bincount(columns, gains * y, minlength=d)
        count = np.bincount(columns, minlength=d)
        measured = count > 0
        value = np.divide(gy, G, out=np.zeros(d), where=measured)
        # per coefficient: sum_i y_i^2 - value^2 G, what repeats of one coefficient leave unexplained
        residual = np.maximum(np.bincount(columns, y * y, minlength=d) - value**2 * G, 0.0)
        return value, G, count, measured, residual, y

    # -- the exact posterior ---------------------------------------------------------------------------------
    def _posterior(self, data, params):
        """Sum-product on the tree: group posteriors, pairwise posteriors with the parent, the evidence of the
        coefficients (without the repeat-residual constant) and each coefficient's Gaussian posterior in either
        state (index 0: off, 1: on)."""
        tree, value, G, measured = data.tree, data.value, data.G, data.measured
        p_on, p_off, v0, v_small, s2, beta, kappa = params
        scale_of = data.scale_of
        # an unmeasured coefficient keeps its prior and adds nothing to the evidence: compute on the measured ones
        seen = np.flatnonzero(measured)
        noise = s2 * data.noise_weight[seen] / G[seen]
        off_var = v_small[scale_of]
        on_mean = beta[scale_of] * data.prediction
        on_var = v0[scale_of] + kappa * data.prediction**2
        log_like_coef = np.zeros((value.shape[0], 2))
        mean, var = [], []
        for state, (prior_mean, prior_var) in enumerate(((None, off_var), (on_mean, on_var))):
            seen_var = prior_var[seen]
            total = seen_var + noise
            innovation = value[seen] if prior_mean is None else value[seen] - prior_mean[seen]
            log_like_coef[seen, state] = -0.5 * (_LOG_2PI + np.log(total) + innovation**2 / total)
            posterior_mean = np.zeros(value.shape[0]) if prior_mean is None else prior_mean.copy()
            posterior_mean[seen] += seen_var / total * innovation
            posterior_var = prior_var.copy()
            posterior_var[seen] = seen_var * noise / total
            mean.append(posterior_mean)
            var.append(posterior_var)
        n_groups = tree.group_scale.shape[0]
        if tree.states == "coefficients":  # a state per coefficient: nothing to sum
            log_like = log_like_coef
        else:
            log_like = np.zeros((n_groups, 2))
            log_like[:, 0] = np.bincount(tree.coef_group, log_like_coef[:, 0], minlength=n_groups)
            log_like[:, 1] = np.bincount(tree.coef_group, log_like_coef[:, 1], minlength=n_groups)
        # transition probabilities [z_parent, z_g] per scale (the approximation is always on), then per group
        trans = np.zeros((p_on.shape[0] + 1, 2, 2))
        trans[:, :, 1] = 1.0
        trans[1:, 1, 1], trans[1:, 0, 1] = p_on, p_off
        trans[:, :, 0] = 1.0 - trans[:, :, 1]
        with np.errstate(divide="ignore"):
            marginals = sum_product(tree.groups, log_like, np.log(trans)[tree.group_scale])
        prob = marginals.prob
        prob[tree.group_scale == 0] = 1.0
        return prob, marginals.pair, marginals.log_z, mean, var

    # -- fit -------------------------------------------------------------------------------------------------
    def _start(self, tree, value, G, measured, y):
        L = len(tree.levels)
        if self.warm_start and hasattr(self, "v0_") and hasattr(self, "beta_") and self.beta_.shape == (L + 1,):
            beta, kappa = (self.beta_.copy(), float(self.kappa_)) if self.prediction else (np.zeros(L + 1), 0.0)
            if self.prediction and kappa == 0.0:  # the previous fit had no prediction
                beta, kappa = np.full(L + 1, PREDICTION_START[0]), PREDICTION_START[1]
            return (self.p_on_.copy(), self.p_off_.copy(), self.v0_.copy(), self.v_small_.copy(),
                    float(self.noise_var_), beta, kappa)
        p_on = np.broadcast_to(np.asarray(self.p_on, dtype=float), (L,)).copy()
        p_off = np.broadcast_to(np.asarray(self.p_off, dtype=float), (L,)).copy()
        scale_of = tree.group_scale[tree.coef_group]
        mean_square = float(np.mean(y * y))
        if self.v0 is None:
            v0 = np.array([np.mean(value[measured & (scale_of == s)] ** 2) if np.any(measured & (scale_of == s))
                           else np.nan for s in range(L + 1)])
            v0 = np.where(np.isfinite(v0) & (v0 > 0), v0, np.nanmax(np.append(v0, mean_square)))
        else:
            v0 = np.broadcast_to(np.asarray(self.v0, dtype=float), (L + 1,)).copy()
        v_small = np.broadcast_to(np.asarray(self.v_small, dtype=float), (L + 1,)).copy()
        if "v_small" in self._learned:
            v_small = np.where(v_small > 0, v_small, v0 / 100)
        if self.noise_var is None:
            finest = measured & (scale_of == scale_of[measured].max()) if measured.any() else measured
            s2 = 0.1 * float(np.median(value[finest] ** 2 * G[finest])) if finest.any() else 0.1 * mean_square
            s2 = max(s2, NOISE_FLOOR * mean_square)
        else:
            s2 = float(self.noise_var)
        if self.prediction:
            beta, kappa = np.full(L + 1, PREDICTION_START[0]), PREDICTION_START[1]
            beta[0] = 0.0
        else:
            beta, kappa = np.zeros(L + 1), 0.0
        return p_on, p_off, v0, v_small, s2, beta, kappa

    @property
    def _learned(self) -> tuple:
        """What EM learns: ``learn``, without the noise variance where ``photons`` gives it."""
        return tuple(name for name in self.learn if name != "noise_var" or self.photons is None)

    def _noise_weight(self, value, measured) -> tuple[np.ndarray, float | None]:
        """Each basis image's noise variance relative to ``noise_var`` (the photon model's light, or ones), and the
        noise variance that ``photons`` gives (None without it)."""
        d = self.basis.d
        if self.noise == "constant":
            return np.ones(d), None
        approximation = self.basis.scales() == 0
        known = approximation & measured
        if not known.any():  # nothing to estimate the light from yet
            if self.photons is not None:
                raise ValueError("photons: the light of the patterns is estimated from the approximation, and no "
                                 "approximation coefficient is measured")
            return np.ones(d), None
        # the approximation image, an unmeasured approximation coefficient taken as the mean of the measured ones
        coarse = self.basis.synthesize(np.where(known, value, np.where(approximation, np.mean(value[known]), 0.0)))
        if not np.mean(coarse) > 0:
            raise ValueError("noise='photon' needs measurements of non-negative intensities; the approximation "
                             f"image has mean {np.mean(coarse):.3g}")
        light = self.basis.pattern_light(np.maximum(coarse, 0.0))
        mean_light = float(np.mean(light))
        # a dark region still has dark counts and read noise
        return np.maximum(light / mean_light, LIGHT_FLOOR), None if self.photons is None else mean_light / self.photons

    def _predict_details(self, coef: np.ndarray) -> np.ndarray:
        """The wavelet prediction of every detail from the coarser scales of ``coef`` (0 for the approximation)."""
        from adaptcs.bases.prediction import predicted_coefficients

        predicted = predicted_coefficients(self.basis, coef)
        predicted[self.basis.scales() == 0] = 0.0
        return predicted

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Exact posterior and EM-learned hyper-parameters from measurements of single coefficients.

        Parameters
        ----------
        X : array-like, shape (n, d)
            Each row measures one coefficient (``g e_j``).
        y : array-like, shape (n,)
        """
        unknown = set(self.learn) - set(self.LEARNABLE)
        if unknown:
            raise ValueError(f"learn may name {self.LEARNABLE}; got {sorted(unknown)}")
        if self.photons is not None and (self.noise != "photon" or self.noise_var is not None):
            raise ValueError("photons gives the noise of the photon model: it needs noise='photon' and no noise_var")
        tree = WaveletTree(self.basis, self.states)
        value, G, count, measured, residual, y = self._measurements(X, y)
        weight, known_noise_var = self._noise_weight(value, measured)
        if self.prediction:
            warm = self.warm_start and getattr(self, "coef_", None) is not None and self.coef_.shape == value.shape
            prediction = self._predict_details(self.coef_ if warm else np.where(measured, value, 0.0))
        else:
            prediction = np.zeros(self.basis.d)
        if self.noise == "constant":  # summed first, as the scalar it is (sums of round-off differ by the order)
            residual_sum = max(float(np.sum(y * y) - np.sum(value[measured] ** 2 * G[measured])), 0.0)
        else:
            residual_sum = float(np.sum(residual / weight))
        data = _Scan(tree, value, G, measured, residual_sum, y.shape[0],
                     NOISE_FLOOR * float(np.mean(y * y)), weight, prediction, tree.group_scale[tree.coef_group])
        params = self._start(tree, value, G, measured, y)
        if known_noise_var is not None:  # the light can change with the approximation measured since a warm start
            params = params[:4] + (known_noise_var,) + params[5:]
        post = self._posterior(data, params)
        learning = bool(self._learned)
        converged, iterations = not learning and not self.prediction, 0
        while (learning or self.prediction) and iterations < self.max_iter:
            iterations += 1
            if self.prediction and iterations & (iterations - 1) == 0:
                # the prediction follows the posterior mean (iterations 1, 2, 4, 8, ...: cheap against EM)
                data, post = self._refresh_prediction(data, params, post)
            if not learning:
                moved = 0.0
            else:
                first = self._m_step(data, post, params)
                moved = _moved(params, first)
            if moved < self.tol:  # the EM step from here is negligible: a fixed point, if the prediction holds
                if not self.prediction:
                    converged = True
                    break
                before = data.prediction
                data, post = self._refresh_prediction(data, params, post)
                if _prediction_moved(before, data.prediction, params) < self.tol:
                    converged = True
                    break
                continue
            post_first = self._posterior(data, first)
            second = self._m_step(data, post_first, first)
            post_second = self._posterior(data, second)
            start, r = _pack(params, self._learned), _pack(first, self._learned) - _pack(params, self._learned)
            v = _pack(second, self._learned) - _pack(first, self._learned) - r
            params, post = second, post_second
            if np.linalg.norm(v) > 0:
                # SQUAREM (Varadhan & Roland 2008): two EM steps, then a jump along them, kept only if it does
                # not lower the evidence (so the evidence never decreases); plain EM crawls along this model's
                # ridges
                alpha = min(-np.linalg.norm(r) / np.linalg.norm(v), -1.0)
                # a jump of at most MAX_JUMP (logit or log units) per parameter beyond the second step: far
                # jumps only overflow, and one rejected jump costs a posterior
                target = _pack(second, self._learned)
                theta = np.clip(start - 2 * alpha * r + alpha**2 * v, target - MAX_JUMP, target + MAX_JUMP)
                jump = _slab_floor(_unpack(theta, second, self._learned, data.noise_floor), data)
                with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
                    post_jump = self._posterior(data, jump)
                if np.isfinite(post_jump[2]) and _finite(post_jump) \
                        and post_jump[2] + _log_prior(jump) >= post_second[2] + _log_prior(second):
                    params, post = jump, post_jump
        if not converged:
            what = "EM" if learning else "the prediction's fixed point"
            warnings.warn(f"WaveletTreeSpikeSlab: {what} did not converge in {self.max_iter} iterations; the fit "
                          "is marked not converged", ConvergenceWarning, stacklevel=4)
        prob, pair, log_z, mean, var = post
        p_on, p_off, v0, v_small, s2, beta, kappa = params
        q = prob[tree.coef_group]
        self.coef_ = q * mean[1] + (1 - q) * mean[0]
        self.coef_var_ = q * (mean[1] ** 2 + var[1]) + (1 - q) * (mean[0] ** 2 + var[0]) - self.coef_**2
        self.group_prob_, self.coef_prob_ = prob, q
        self.p_on_, self.p_off_, self.v0_, self.v_small_, self.noise_var_ = p_on, p_off, v0, v_small, s2
        self.beta_, self.kappa_ = beta, kappa
        self.prediction_, self.noise_weight_ = data.prediction, weight
        # the repeats' constant: sum_i log N(y_i | g_i c, s2 w) = log N(value | c, s2 w / G) + this, per coefficient
        repeats = -0.5 * (np.sum((count[measured] - 1) * (_LOG_2PI + np.log(s2 * weight[measured])))
                          + np.sum(np.log(G[measured])) + data.residual / s2)
        self.log_evidence_ = log_z + float(repeats)
        self.n_iter_, self.converged_ = iterations, converged
        self.n_features_in_ = self.basis.d
        return self

    def _refresh_prediction(self, data, params, post):
        """The data with the prediction of the posterior mean ``post``, and the posterior there."""
        prob, _pair, _log_z, mean, _var = post
        q = prob[data.tree.coef_group]
        data = replace(data, prediction=self._predict_details(q * mean[1] + (1 - q) * mean[0]))
        return data, self._posterior(data, params)

    def _m_step(self, data, post, params):
        """One M-step of EM from the posterior ``post`` at ``params``: new (p_on, p_off, v0, v_small, s2, beta,
        kappa)."""
        tree, value, G, measured = data.tree, data.value, data.G, data.measured
        prob, pair, _log_z, mean, var = post
        p_on, p_off, v0, v_small, s2 = params[0].copy(), params[1].copy(), params[2].copy(), params[3].copy(), params[4]
        beta, kappa = params[5].copy(), params[6]
        q = prob[tree.coef_group]  # P(on | y) of each coefficient
        weights = (1 - q, q)
        # with the prediction, the slab's gain, kappa and v0 are maximised together by alternating their exact
        # updates (the expected log-likelihood is fixed by the posterior): one alternation only would be EM with
        # the slab split into two parts as well, which crawls where one part explains a scale
        inner = self.prediction and bool(self._learned)
        moments = _Moments.of(data, q, mean, var, v0.shape[0])
        for _ in range(PREDICTION_INNER if inner else 1):
            before = (beta, kappa, v0.copy())
            if inner:
                beta, kappa = self._prediction_m_step(moments, v0, beta, kappa)
            self._variance_m_step(moments, v0, v_small, beta, kappa)
            if max(np.abs(beta - before[0]).max(), abs(np.log(kappa / before[1])) if before[1] > 0 else 0.0,
                   np.abs(np.log(v0 / before[2])).max()) < 0.1 * self.tol:
                break
        if "noise_var" in self._learned:
            # E[(value - c)^2] under the posterior mixture, scaled back by G and the noise weight; plus the
            # repeats' residual
            miss = sum(w * ((value - m) ** 2 + v) for w, m, v in zip(weights, mean, var, strict=True))
            s2 = max((data.residual + float(np.sum((G * miss / data.noise_weight)[measured]))) / data.n,
                     data.noise_floor)
        self._transitions(tree, prob, pair, p_on, p_off)
        return _slab_floor((p_on, p_off, v0, v_small, s2, beta, kappa), data)

    def _variance_m_step(self, moments, v0, v_small, beta, kappa) -> None:
        """EM's update of the learned ``v0`` and ``v_small`` (in place) for the given gain and ``kappa``."""
        m = moments
        for name, target, state in (("v_small", v_small, 0), ("v0", v0, 1)):
            if name not in self._learned:
                continue
            # per scale: expected count W and expected sum of squares S of the coefficients in this state
            # (unmeasured coefficients add nothing at EM's fixed point, so they are left out); of E[(c - prior
            # mean)^2 | state, y], with the prediction the slab's share of it (see _prediction_m_step)
            if state == 1 and self.prediction:
                second = _slab_share(v0[m.scale_of], kappa * m.prediction_sq, m.on_residual(beta))
                S = np.bincount(m.scale_of, m.weights[1] * second, minlength=m.n_scales)
            else:
                S = m.second_sum[state]
            W = m.count[state]
            if state == 1 and W[0] > 1e-12:
                target[0] = S[0] / W[0]  # the approximation: free
            if self.scale_profile == "decay":
                target[1:] = decay_profile(W[1:], S[1:], target[1:])
            else:
                seen = W[1:] > 1e-12
                target[1:][seen] = S[1:][seen] / W[1:][seen]

    def _prediction_m_step(self, moments, v0, beta, kappa):
        """EM's update of the prediction's gain per scale and of ``kappa`` (for the given ``v0``).

        Gain: weighted least squares of ``E[c_j | on, y]`` on ``p_j`` per scale (weights ``q_j / V_j``,
        ``V_j = v0 + kappa p_j^2``) with the prior ``beta ~ N(1, 1)``, exact for fixed variances. ``kappa``: the
        slab split into independent parts ``a ~ N(0, v0)`` and ``b ~ N(0, kappa p^2)``,
        ``kappa = sum q E[b^2 | y] / p^2 / sum q`` over the measured details (exact for the split)."""
        m = moments
        s = m.detail_scale
        total_var = v0[s] + kappa * m.detail_prediction_sq
        numerator = np.bincount(s, m.gain_numerator / total_var, minlength=m.n_scales)
        denominator = np.bincount(s, m.gain_denominator / total_var, minlength=m.n_scales)
        beta = beta.copy()
        seen = denominator > 0
        seen[0] = False
        # MAP under beta ~ N(1, 1) per scale (worth one detail whose predicted square equals its variance): a
        # scale whose predictions are all near zero (a flat coarse image) keeps beta near 1 instead of dividing
        # by nothing
        beta[seen] = (numerator[seen] + BETA_PRIOR[0] / BETA_PRIOR[1]) / (denominator[seen] + 1 / BETA_PRIOR[1])
        if seen.any():  # finer scales with no measurement follow the finest measured scale
            finest = seen.shape[0] - 1 - int(seen[::-1].argmax())
            beta[finest + 1:] = beta[finest]
        if m.informative_scale.size:
            p_sq = m.informative_prediction_sq
            share = _slab_share(kappa * p_sq, v0[m.informative_scale], m.informative_on_residual(beta))
            kappa = float((m.informative_on * (share / p_sq)).sum() / m.informative_weight)
            kappa = max(kappa, KAPPA_FLOOR)
        return beta, kappa

    def _transitions(self, tree, prob, pair, p_on, p_off) -> None:
        """EM's update of the transition probabilities (in place): expected transitions over expected parents."""
        for name, target, z_parent in (("p_on", p_on, 1), ("p_off", p_off, 0)):
            if name not in self._learned:
                continue
            for s, level in enumerate(tree.levels, start=1):
                if s == 1:
                    if z_parent == 1:  # roots: the virtual parent is on
                        target[0] = float(np.mean(prob[level]))
                    continue
                weight = np.sum(pair[level, z_parent, :])
                if weight > 1e-12:
                    target[s - 1] = float(np.sum(pair[level, z_parent, 1]) / weight)
            np.clip(target, *PROBABILITY_BOUNDS, out=target)

    def predict(self, X, return_std=False):
        """Posterior mean of ``X c``, shape (n,); with ``return_std``, also the predictive standard deviation of a
        new measurement of each row (noise included), exact for rows that measure one coefficient (what this
        model fits: ``x^T V x = g^2 V_jj``). For other rows it uses the marginal variances only (posterior
        correlations between coefficients, which the states induce, are left out)."""
        X = np.atleast_2d(np.asarray(X, dtype=float))
        mean = X @ self.coef_
        if not return_std:
            return mean
        columns = np.abs(X).argmax(axis=1)
        noise = self.noise_var_ * self.noise_weight_[columns]
        return mean, np.sqrt(X**2 @ self.coef_var_ + noise)

    def cov_matvec(self, v):
        """The posterior marginal variances times ``v`` (shape (d,) or (d, k)): ``x^T V x`` exact for a basis row
        ``x``, so the designer's choices among basis images are this model's (the largest variance first); the
        correlations between coefficients that the states induce are left out."""
        v = np.asarray(v, dtype=float)
        return self.coef_var_[:, None] * v if v.ndim == 2 else self.coef_var_ * v
