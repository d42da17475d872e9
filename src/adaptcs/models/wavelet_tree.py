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
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from scipy import sparse
from scipy.special import expit, logit
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from adaptcs import _validation as val
from adaptcs.basis import WaveletBasis
from adaptcs.models._base import GroupRegressor
from adaptcs.models._hmt import GroupTree, sum_product

_LOG_2PI = float(np.log(2.0 * np.pi))
PROBABILITY_BOUNDS = (1e-6, 1.0 - 1e-6)  # EM keeps transition probabilities inside these
NOISE_FLOOR = 1e-10  # learned noise variance stays above this fraction of the mean squared measurement
MAX_JUMP = 5.0  # SQUAREM jumps move no parameter more than this (logit or log units) beyond EM's second step
STATES = ("groups", "coefficients")


class WaveletTree:
    """The quadtree of a wavelet basis: of its groups (2 x 2 siblings), or of its coefficients.

    Parameters
    ----------
    basis : WaveletBasis
    states : {"groups", "coefficients"}
        "groups": a state per group of the basis, the four children of one parent coefficient, whose parent is the
        group of that coefficient; "coefficients": a state per coefficient (Crouse, Nowak & Baraniuk's tree), whose
        parent is its parent coefficient.

    Attributes
    ----------
    coef_group : ndarray of intp, shape (d,)
        Group index of each coefficient (the basis's groups, relabelled 0..G-1 in coefficient order; with
        ``states="coefficients"`` every coefficient is a group of its own).
    group_scale : ndarray of int, shape (G,)
        Scale of each group (0: the approximation).
    parent : ndarray of intp, shape (G,)
        Parent group of each detail group; -1 for the roots (the coarsest details) and the approximation.
    groups : GroupTree
        The same tree for :func:`adaptcs.models._hmt.sum_product` (the approximation's groups are roots).
    levels : list of ndarray
        Detail group indices per scale, coarse to fine.
    """

    def __init__(self, basis: WaveletBasis, states: str = "groups"):
        if not isinstance(basis, WaveletBasis):
            raise ValueError(f"the wavelet tree needs a wavelet basis (haar, db2, db4); got {type(basis).__name__}")
        if states not in STATES:
            raise ValueError(f"states must be one of {STATES}; got {states!r}")
        if states == "groups":
            _, self.coef_group = np.unique(basis.groups(), return_inverse=True)
        else:
            self.coef_group = np.arange(basis.d, dtype=np.intp)
        n_groups = int(self.coef_group.max()) + 1
        self.group_scale = np.zeros(n_groups, dtype=np.int64)
        self.group_scale[self.coef_group] = basis.scales()
        self.groups = GroupTree.of_coefficients(self.coef_group, basis.parents())
        self.parent = self.groups.parent
        self.levels = [np.flatnonzero(self.group_scale == s) for s in range(1, basis.level + 1)]


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

    Attributes
    ----------
    coef_ : ndarray, shape (d,)
        Posterior mean.
    coef_var_ : ndarray, shape (d,)
        Posterior marginal variances (what a basis scan's design reads: ``x^T V x`` of basis row ``j``).
    group_prob_ : ndarray, shape (G,)
        ``P(z_g = 1 | y)`` of every state (1 for the approximation's); G = d with ``states="coefficients"``.
    p_on_, p_off_ : ndarray, shape (L,)
    v0_, v_small_ : ndarray, shape (L + 1,)
    noise_var_ : float
    log_evidence_ : float
        ``log p(y)`` at the fitted hyper-parameters.
    n_iter_ : int
    converged_ : bool

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.basis import make_basis
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
    }
    LEARNABLE = ("p_on", "p_off", "v0", "v_small", "noise_var")
    accepts_sparse_selection = True  # fit takes a scipy.sparse X (replay_basis_scan passes one)
    # replay_basis_scan's refits between checkpoints take at most this many EM iterations (warm-started, the values
    # go on moving at the next refit): with a small-variance off state EM crawls along the ridge between it and the
    # noise (hundreds of iterations per refit), and those refits only choose the next rows
    replay_tracking_iterations = 10

    def __init__(self, basis, *, states="coefficients", p_on=0.7, p_off=0.1, v0=None, v_small=0.0, noise_var=None,
                 learn=("p_on", "p_off", "v0", "noise_var"), scale_profile="decay", max_iter=500, tol=1e-4,
                 warm_start=False):
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
        else:
            X, y = val.check_fit_data(self, X, y)
            if X.shape[1] != d:
                raise ValueError(f"X has {X.shape[1]} columns; the basis has {d} coefficients")
            magnitude = np.abs(X)
            columns = magnitude.argmax(axis=1)
            gains = X[np.arange(X.shape[0]), columns]
            if np.any(gains == 0) or np.count_nonzero(magnitude > 1e-12 * np.abs(gains)[:, None]) != X.shape[0]:
                raise ValueError("WaveletTreeSpikeSlab needs rows that each measure one coefficient (a basis scan); "
                                 "for other rows use GroupSpikeSlabEP(groups, scales=basis.scales())")
        G = np.bincount(columns, gains * gains, minlength=d)
        gy = np.bincount(columns, gains * y, minlength=d)
        count = np.bincount(columns, minlength=d)
        measured = count > 0
        value = np.divide(gy, G, out=np.zeros(d), where=measured)
        residual = float(np.sum(y * y) - np.sum(value[measured] ** 2 * G[measured]))
        return value, G, count, measured, max(residual, 0.0), y

    # -- the exact posterior ---------------------------------------------------------------------------------
    def _posterior(self, tree, value, G, measured, p_on, p_off, v0, v_small, s2):
        """Sum-product on the tree: group posteriors, pairwise posteriors with the parent, the evidence of the
        coefficients (without the repeat-residual constant) and each coefficient's Gaussian posterior in either
        state (index 0: off, 1: on)."""
        scale_of = tree.group_scale[tree.coef_group]
        noise = np.where(measured, s2 / np.where(measured, G, 1.0), np.inf)
        log_like_coef, mean, var = [], [], []
        for prior_var in (v_small[scale_of], v0[scale_of]):
            total = prior_var + noise
            log_like_coef.append(np.where(measured, -0.5 * (_LOG_2PI + np.log(total) + value**2 / total), 0.0))
            mean.append(np.where(measured, prior_var / total * np.where(measured, value, 0.0), 0.0))
            var.append(np.where(measured, prior_var * np.where(measured, noise, 0.0) / total, prior_var))
        n_groups = tree.group_scale.shape[0]
        log_like = np.zeros((n_groups, 2))
        log_like[:, 0] = np.bincount(tree.coef_group, log_like_coef[0], minlength=n_groups)
        log_like[:, 1] = np.bincount(tree.coef_group, log_like_coef[1], minlength=n_groups)
        # transition probabilities of each group [z_parent, z_g]; the approximation is always on
        s = tree.group_scale
        detail = s > 0
        trans = np.zeros((n_groups, 2, 2))
        trans[:, :, 1] = 1.0
        trans[detail, 1, 1], trans[detail, 0, 1] = p_on[s[detail] - 1], p_off[s[detail] - 1]
        trans[:, :, 0] = 1.0 - trans[:, :, 1]
        with np.errstate(divide="ignore"):
            marginals = sum_product(tree.groups, log_like, np.log(trans))
        prob = marginals.prob
        prob[~detail] = 1.0
        return prob, marginals.pair, marginals.log_z, mean, var

    # -- fit -------------------------------------------------------------------------------------------------
    def _start(self, tree, value, G, measured, y):
        L = len(tree.levels)
        if self.warm_start and hasattr(self, "v0_"):
            return (self.p_on_.copy(), self.p_off_.copy(), self.v0_.copy(), self.v_small_.copy(),
                    float(self.noise_var_))
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
        if "v_small" in self.learn:
            v_small = np.where(v_small > 0, v_small, v0 / 100)
        if self.noise_var is None:
            finest = measured & (scale_of == scale_of[measured].max()) if measured.any() else measured
            s2 = 0.1 * float(np.median(value[finest] ** 2 * G[finest])) if finest.any() else 0.1 * mean_square
            s2 = max(s2, NOISE_FLOOR * mean_square)
        else:
            s2 = float(self.noise_var)
        return p_on, p_off, v0, v_small, s2

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
        tree = WaveletTree(self.basis, self.states)
        value, G, count, measured, residual, y = self._measurements(X, y)
        data = _Scan(tree, value, G, measured, residual, y.shape[0], NOISE_FLOOR * float(np.mean(y * y)))
        params = self._start(tree, value, G, measured, y)
        post = self._posterior(tree, value, G, measured, *params)
        converged, iterations = not self.learn, 0
        while self.learn and iterations < self.max_iter:
            # SQUAREM (Varadhan & Roland 2008): two EM steps, then a jump along them, kept only if it does not
            # lower the evidence (so the evidence never decreases); plain EM crawls along this model's ridges
            iterations += 1
            first = self._m_step(data, post, params)
            if _moved(params, first) < self.tol:  # the EM step from here is negligible: a fixed point
                converged = True
                break
            post_first = self._posterior(tree, value, G, measured, *first)
            second = self._m_step(data, post_first, first)
            post_second = self._posterior(tree, value, G, measured, *second)
            start, r = _pack(params, self.learn), _pack(first, self.learn) - _pack(params, self.learn)
            v = _pack(second, self.learn) - _pack(first, self.learn) - r
            params, post = second, post_second
            if np.linalg.norm(v) > 0:
                alpha = min(-np.linalg.norm(r) / np.linalg.norm(v), -1.0)
                # a jump of at most MAX_JUMP (logit or log units) per parameter beyond the second step: far
                # jumps only overflow, and one rejected jump costs a posterior
                target = _pack(second, self.learn)
                theta = np.clip(start - 2 * alpha * r + alpha**2 * v, target - MAX_JUMP, target + MAX_JUMP)
                jump = _unpack(theta, second, self.learn, data.noise_floor)
                with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
                    post_jump = self._posterior(tree, value, G, measured, *jump)
                if np.isfinite(post_jump[2]) and post_jump[2] >= post_second[2] and _finite(post_jump):
                    params, post = jump, post_jump
        if not converged:
            warnings.warn(f"WaveletTreeSpikeSlab: EM did not converge in {self.max_iter} iterations; the fit is "
                          "marked not converged", ConvergenceWarning, stacklevel=3)
        prob, pair, log_z, mean, var = post
        p_on, p_off, v0, v_small, s2 = params
        q = prob[tree.coef_group]
        self.coef_ = q * mean[1] + (1 - q) * mean[0]
        self.coef_var_ = q * (mean[1] ** 2 + var[1]) + (1 - q) * (mean[0] ** 2 + var[0]) - self.coef_**2
        self.group_prob_ = prob
        self.p_on_, self.p_off_, self.v0_, self.v_small_, self.noise_var_ = p_on, p_off, v0, v_small, s2
        # the repeats' constant: sum_i log N(y_i | g_i c, s2) = log N(value | c, s2 / G) + this, per coefficient
        repeats = -0.5 * (np.sum(count[measured] - 1) * (_LOG_2PI + np.log(s2)) + np.sum(np.log(G[measured]))
                          + residual / s2)
        self.log_evidence_ = log_z + float(repeats)
        self.n_iter_, self.converged_ = iterations, converged
        self.n_features_in_ = self.basis.d
        return self

    def _m_step(self, data, post, params):
        """One M-step of EM from the posterior ``post`` at ``params``: new (p_on, p_off, v0, v_small, s2)."""
        tree, value, G, measured = data.tree, data.value, data.G, data.measured
        prob, pair, _log_z, mean, var = post
        p_on, p_off, v0, v_small, s2 = params[0].copy(), params[1].copy(), params[2].copy(), params[3].copy(), params[4]
        scale_of = tree.group_scale[tree.coef_group]
        q = prob[tree.coef_group]  # P(on | y) of each coefficient
        weights = (1 - q, q)
        for name, target, state in (("v_small", v_small, 0), ("v0", v0, 1)):
            if name not in self.learn:
                continue
            second = mean[state] ** 2 + var[state]  # E[c^2 | state, y]
            # per scale: expected count W and expected sum of squares S of the coefficients in this state
            # (unmeasured coefficients add nothing at EM's fixed point, so they are left out)
            W = np.bincount(scale_of[measured], weights[state][measured], minlength=target.shape[0])
            S = np.bincount(scale_of[measured], (weights[state] * second)[measured], minlength=target.shape[0])
            if state == 1 and W[0] > 1e-12:
                target[0] = S[0] / W[0]  # the approximation: free
            if self.scale_profile == "decay":
                target[1:] = decay_profile(W[1:], S[1:], target[1:])
            else:
                seen = W[1:] > 1e-12
                target[1:][seen] = S[1:][seen] / W[1:][seen]
        if "noise_var" in self.learn:
            # E[(value - c)^2] under the posterior mixture, scaled back by G; plus the repeats' residual
            miss = sum(w * ((value - m) ** 2 + v) for w, m, v in zip(weights, mean, var, strict=True))
            s2 = max((data.residual + float(np.sum((G * miss)[measured]))) / data.n, data.noise_floor)
        self._transitions(tree, prob, pair, p_on, p_off)
        return p_on, p_off, v0, v_small, s2

    def _transitions(self, tree, prob, pair, p_on, p_off) -> None:
        """EM's update of the transition probabilities (in place): expected transitions over expected parents."""
        for name, target, z_parent in (("p_on", p_on, 1), ("p_off", p_off, 0)):
            if name not in self.learn:
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

    def predict(self, X):
        """Posterior mean of ``X c``, shape (n,)."""
        X = np.atleast_2d(np.asarray(X, dtype=float))
        return X @ self.coef_


def decay_profile(W: np.ndarray, S: np.ndarray, current: np.ndarray, newton_steps: int = 50) -> np.ndarray:
    """EM's M-step for variances ``v_s = exp(a - b s')`` (``s' = 0, 1, ...``) over scales: maximise
    ``sum_s -W_s log v_s / 2 - S_s / (2 v_s)`` (concave in ``(a, b)``) by Newton's method from ``current``.

    Parameters
    ----------
    W, S : ndarray, shape (L,)
        Expected counts and expected sums of squares per scale (zero where a scale has no measurement).
    current : ndarray, shape (L,)
        The current variances (the start; ``b`` is kept when fewer than two scales have data).

    Returns
    -------
    ndarray, shape (L,)
    """
    index = np.arange(W.shape[0], dtype=float)
    seen = W > 1e-12
    if not seen.any():
        return current
    t = np.log(current)
    a, b = t[0], (t[0] - t[-1]) / max(index[-1], 1.0)
    if seen.sum() < 2:  # the slope is not identified: keep it, fit the level in closed form
        a = float(np.log(np.sum(S[seen] * np.exp(b * index[seen])) / np.sum(W[seen])))
        return np.exp(a - b * index)
    J = np.stack([np.ones_like(index), -index], axis=1)  # dt/d(a, b)

    def objective(theta):
        t = J @ theta
        with np.errstate(over="ignore"):  # a trial step far out: -inf, rejected by the backtracking
            return float(np.sum(-0.5 * W * t - 0.5 * S * np.exp(-t)))

    theta = np.array([a, b])
    for _ in range(newton_steps):
        e = S * np.exp(-(J @ theta))
        grad = J.T @ (0.5 * (e - W))
        hess = (J * (-0.5 * e)[:, None]).T @ J
        step = np.linalg.solve(hess - 1e-12 * np.eye(2), -grad)
        step *= min(1.0, 5.0 / max(np.max(np.abs(step)), 1e-300))  # at most a factor e^5 per step
        before = objective(theta)
        while objective(theta + step) < before and np.max(np.abs(step)) > 1e-12:  # backtrack: never go down
            step = step / 2
        theta = theta + step
        if np.max(np.abs(step)) < 1e-10:
            break
    return np.exp(J @ theta)


@dataclass(frozen=True)
class _Scan:
    """What EM needs of the data (sufficient statistics of a basis scan)."""

    tree: WaveletTree
    value: np.ndarray
    G: np.ndarray
    measured: np.ndarray
    residual: float
    n: int
    noise_floor: float


def _pack(params, learn) -> np.ndarray:
    """The learned hyper-parameters as one unconstrained vector (logits of probabilities, logs of variances)."""
    p_on, p_off, v0, v_small, s2 = params
    parts = [logit(p_on) if "p_on" in learn else [], logit(p_off) if "p_off" in learn else [],
             np.log(v0) if "v0" in learn else [], np.log(v_small[1:]) if "v_small" in learn else [],
             [np.log(s2)] if "noise_var" in learn else []]
    return np.concatenate([np.asarray(p, dtype=float) for p in parts])


def _unpack(theta, template, learn, noise_floor):
    """Inverse of :func:`_pack`; what is not learned is taken from ``template``."""
    p_on, p_off, v0, v_small, s2 = (template[0].copy(), template[1].copy(), template[2].copy(), template[3].copy(),
                                    template[4])
    at = 0
    for name, target, transform in (("p_on", p_on, expit), ("p_off", p_off, expit), ("v0", v0, np.exp)):
        if name in learn:
            target[:] = transform(theta[at:at + target.shape[0]])
            at += target.shape[0]
    np.clip(p_on, *PROBABILITY_BOUNDS, out=p_on)
    np.clip(p_off, *PROBABILITY_BOUNDS, out=p_off)
    if "v_small" in learn:
        v_small[1:] = np.exp(theta[at:at + v_small.shape[0] - 1])
        at += v_small.shape[0] - 1
    if "noise_var" in learn:
        s2 = max(float(np.exp(theta[at])), noise_floor)
    return p_on, p_off, v0, v_small, s2


def _finite(post) -> bool:
    """Whether a posterior's probabilities, means and variances are all finite."""
    prob, _pair, _log_z, mean, var = post
    return bool(np.all(np.isfinite(prob)) and all(np.all(np.isfinite(m)) for m in (*mean, *var)))


def _moved(before, after) -> float:
    """How far one EM step moved: probabilities in absolute value (one drifting to 0 would move by constant
    log steps forever), variances in log units."""
    steps = [np.abs(after[0] - before[0]), np.abs(after[1] - before[1])]
    for b, a in ((before[2], after[2]), (before[3], after[3]), (np.atleast_1d(before[4]), np.atleast_1d(after[4]))):
        positive = (a > 0) & (b > 0)
        steps.append(np.abs(np.log(a[positive]) - np.log(b[positive])))
    return float(max(np.max(x) if x.size else 0.0 for x in steps))
