"""The wavelet quadtree over a basis (:class:`WaveletTree`) and the pieces of the wavelet tree's EM
(:class:`adaptcs.models.wavelet_tree.WaveletTreeSpikeSlab`) that are not the estimator's state: the scan and its
expected moments per scale, the M-step of a variance profile over scales, the slab's share of a second moment, the
floors and the prior on the learned values, and the packing of the learned values into one vector for the
extrapolated EM step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, logit

from adaptcs.bases.images import WaveletBasis
from adaptcs.models._hmt import GroupTree

PROBABILITY_BOUNDS = (1e-6, 1.0 - 1e-6)  # EM keeps transition probabilities inside these
BETA_PRIOR = (1.0, 1.0)  # mean and variance of the prediction's gain per scale (a MAP step, see _prediction_m_step)
KAPPA_FLOOR = 1e-8  # kappa stays positive (its EM step is multiplicative)
STATES = ("groups", "coefficients")
V0_FLOOR = 1e-3  # with the prediction: v0 of a detail scale stays above this fraction of kappa mean(p^2) there


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
    states : str
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
            raise ValueError(f"the wavelet tree needs a wavelet basis (haar, db2, db4, bior2.2, bior4.4); got "
                             f"{type(basis).__name__}")
        if states not in STATES:
            raise ValueError(f"states must be one of {STATES}; got {states!r}")
        self.states = states
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
    a, b = float(t[0]), float((t[0] - t[-1]) / max(index[-1], 1.0))
    if seen.sum() < 2:  # the slope is not identified: keep it, fit the level in closed form
        a = float(np.log(np.sum(S[seen] * np.exp(b * index[seen])) / np.sum(W[seen])))
        return np.exp(a - b * index)
    # Newton on (a, b) with t = a - b s': gradient and Hessian in closed form, the 2 x 2 system by Cramer's rule,
    # in Python floats over the few scales (called many times per fit: numpy's per-call overheads were most of a
    # fit's time); the exponentials of the accepted trial point are those of the next gradient
    terms = [(w, z, float(k)) for k, (w, z) in enumerate(zip(W.tolist(), S.tolist(), strict=True)) if w > 0 or z > 0]
    halves = [(-0.5 * w, 0.5 * z, k) for w, z, k in terms]

    def objective(a, b):
        """The objective at (a, b) and the exponentials exp(b s' - a) (capped: a trial step far out overflows to
        -inf, which the backtracking rejects)."""
        total, exps = 0, []
        for half_w, half_z, k in halves:
            x = b * k - a
            e = math.exp(700.0 if x > 700.0 else x)
            exps.append(e)
            total += half_w * (a - b * k) - half_z * e
        return total, exps

    before, exps = objective(a, b)
    for _ in range(newton_steps):
        g_a = g_b = e_sum = ke_sum = kke_sum = 0.0
        for (w, z, k), unit in zip(terms, exps, strict=True):
            e = z * unit
            g_a += e - w
            g_b -= k * (e - w)
            e_sum += e
            ke_sum += k * e
            kke_sum += k * k * e
        g_a, g_b = 0.5 * g_a, 0.5 * g_b
        h_aa, h_ab, h_bb = -0.5 * e_sum - 1e-12, 0.5 * ke_sum, -0.5 * kke_sum - 1e-12
        det = h_aa * h_bb - h_ab * h_ab
        step_a, step_b = (-g_a * h_bb + g_b * h_ab) / det, (-g_b * h_aa + g_a * h_ab) / det
        largest = max(abs(step_a), abs(step_b))
        shrink = min(1.0, 5.0 / max(largest, 1e-300))  # at most a factor e^5 per step
        step_a, step_b, largest = step_a * shrink, step_b * shrink, largest * shrink
        trial, trial_exps = objective(a + step_a, b + step_b)
        while trial < before and largest > 1e-12:  # backtrack: never go down
            step_a, step_b, largest = step_a / 2, step_b / 2, largest / 2
            trial, trial_exps = objective(a + step_a, b + step_b)
        a, b, before, exps = a + step_a, b + step_b, trial, trial_exps
        if largest < 1e-10:
            break
    return np.exp(a - b * index)


def _slab_share(part_var, other_var, second_moment):
    """``E[a^2 | y]`` for ``x = a + b`` with independent ``a ~ N(0, part_var)``, ``b ~ N(0, other_var)``, where
    ``E[x^2 | y] = second_moment``: ``a | x`` is Gaussian with mean ``part_var / V x`` and variance
    ``part_var - part_var^2 / V`` (``V = part_var + other_var``)."""
    total = part_var + other_var
    if (total > 0).all():
        ratio = part_var / total
    else:
        ratio = np.divide(part_var, total, out=np.zeros_like(total), where=total > 0)
    return part_var * (1 - ratio) + ratio**2 * second_moment


def _slab_floor(params, data):
    """``params`` with every detail scale's ``v0`` at least ``V0_FLOOR`` times its mean predicted slab variance
    ``kappa mean(p^2)`` (with the prediction only). Where the prediction explains a scale, EM drives ``v0`` towards
    0 by ever smaller log steps; below this floor it changes no posterior variance by more than that fraction."""
    p_on, p_off, v0, v_small, s2, beta, kappa = params
    if not kappa > 0:
        return params
    L = v0.shape[0] - 1
    mean_square = np.bincount(data.scale_of, data.prediction**2, minlength=L + 1) \
        / np.maximum(np.bincount(data.scale_of, minlength=L + 1), 1)
    floor = V0_FLOOR * kappa * mean_square
    floor[0] = 0.0
    return p_on, p_off, np.maximum(v0, floor), v_small, s2, beta, kappa


def _log_prior(params) -> float:
    """The log prior of the prediction's gains (what EM maximises with the evidence; 0 without prediction)."""
    beta, kappa = params[5], params[6]
    if not kappa > 0:
        return 0.0
    return float(-0.5 * np.sum((beta[1:] - BETA_PRIOR[0]) ** 2) / BETA_PRIOR[1])


def _prediction_moved(before: np.ndarray, after: np.ndarray, params) -> float:
    """How far the prediction moved, in units of the largest slab standard deviation of the details."""
    beta, v0 = params[5], params[2]
    scale = np.sqrt(float(np.max(v0[1:]))) if v0.shape[0] > 1 else 1.0
    return float(np.max(np.abs(after - before)) * max(float(np.max(np.abs(beta))), 1e-12) / max(scale, 1e-300))


@dataclass(frozen=True)
class _Scan:
    """What EM needs of the data (sufficient statistics of a basis scan)."""

    tree: WaveletTree
    value: np.ndarray
    G: np.ndarray
    measured: np.ndarray
    residual: float  # sum over coefficients of the repeats' residual, divided by the noise weight
    n: int
    noise_floor: float
    noise_weight: np.ndarray  # (d,) each measurement's noise variance relative to s2
    prediction: np.ndarray  # (d,) the wavelet prediction of each detail (0 for the approximation)
    scale_of: np.ndarray  # (d,) scale of each coefficient


@dataclass(frozen=True)
class _Moments:
    """The posterior moments an M-step reads, on the measured coefficients only (m of them), with what stays fixed
    while one M-step alternates its updates (the counts, the off state's sums, the gain's weighted moments)."""

    scale_of: np.ndarray  # (m,)
    n_scales: int
    weights: tuple  # (m,) each: P(off | y), P(on | y)
    on_mean: np.ndarray  # (m,) E[c | on, y]
    on_var: np.ndarray  # (m,) Var[c | on, y]
    prediction: np.ndarray  # (m,)
    prediction_sq: np.ndarray  # (m,)
    count: tuple  # (n_scales,) each: expected count of coefficients off, on per scale
    second_sum: tuple  # (n_scales,) each: expected sum of E[c^2 | state, y] per scale (the on one without prediction)
    gain_numerator: np.ndarray  # q c p of the details, c = E[c | on, y], p the prediction
    gain_denominator: np.ndarray  # q p^2 of the details
    informative_weight: float  # sum of q over the informative details (those with a prediction)
    # the arrays above taken at the details and at the informative details, once per M-step (not per alternation)
    detail_scale: np.ndarray
    detail_prediction_sq: np.ndarray
    informative_scale: np.ndarray  # empty when no detail has a prediction
    informative_prediction: np.ndarray
    informative_prediction_sq: np.ndarray
    informative_on: np.ndarray  # P(on | y)
    informative_on_mean: np.ndarray
    informative_on_var: np.ndarray

    @classmethod
    def of(cls, data, q, mean, var, n_scales) -> _Moments:
        """From the scan ``data``, ``q = P(on | y)`` and the posterior means and variances in either state (each a
        pair of (d,) arrays)."""
        kept = np.flatnonzero(data.measured)
        scale_of = data.scale_of[kept]
        weights = (1 - q[kept], q[kept])
        mean = (mean[0][kept], mean[1][kept])
        var = (var[0][kept], var[1][kept])
        prediction = data.prediction[kept]
        prediction_sq = prediction**2
        count = tuple(np.bincount(scale_of, w, minlength=n_scales) for w in weights)
        second_sum = tuple(np.bincount(scale_of, w * (mu**2 + v), minlength=n_scales)
                           for w, mu, v in zip(weights, mean, var, strict=True))
        detail = np.flatnonzero(scale_of > 0)
        informative = np.flatnonzero((scale_of > 0) & (prediction != 0))
        on = weights[1]
        return cls(scale_of, n_scales, weights, mean[1], var[1], prediction, prediction_sq, count, second_sum,
                   on[detail] * mean[1][detail] * prediction[detail], on[detail] * prediction_sq[detail],
                   float(np.sum(on[informative])), scale_of[detail], prediction_sq[detail], scale_of[informative],
                   prediction[informative], prediction_sq[informative], on[informative], mean[1][informative],
                   var[1][informative])

    def on_residual(self, beta):
        """``E[(c - beta p)^2 | on, y]`` of the m coefficients."""
        return (self.on_mean - beta[self.scale_of] * self.prediction) ** 2 + self.on_var

    def informative_on_residual(self, beta):
        """:meth:`on_residual` of the informative details only."""
        return (self.informative_on_mean - beta[self.informative_scale] * self.informative_prediction) ** 2 \
            + self.informative_on_var


def _pack(params, learn) -> np.ndarray:
    """The learned hyper-parameters as one unconstrained vector (logits of probabilities, logs of variances)."""
    p_on, p_off, v0, v_small, s2, beta, kappa = params
    parts = [logit(p_on) if "p_on" in learn else [], logit(p_off) if "p_off" in learn else [],
             np.log(v0) if "v0" in learn else [], np.log(v_small[1:]) if "v_small" in learn else [],
             [np.log(s2)] if "noise_var" in learn else [],
             beta[1:] if kappa > 0 and learn else [], [np.log(kappa)] if kappa > 0 and learn else []]
    return np.concatenate([np.asarray(p, dtype=float) for p in parts])


def _unpack(theta, template, learn, noise_floor):
    """Inverse of :func:`_pack`; what is not learned is taken from ``template``."""
    p_on, p_off, v0, v_small, s2 = (template[0].copy(), template[1].copy(), template[2].copy(), template[3].copy(),
                                    template[4])
    beta, kappa = template[5].copy(), template[6]
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
        at += 1
    if kappa > 0 and learn:
        beta[1:] = theta[at:at + beta.shape[0] - 1]
        kappa = max(float(np.exp(theta[at + beta.shape[0] - 1])), KAPPA_FLOOR)
    return p_on, p_off, v0, v_small, s2, beta, kappa


def _finite(post) -> bool:
    """Whether a posterior's probabilities, means and variances are all finite."""
    prob, _pair, _log_z, mean, var = post
    return bool(np.all(np.isfinite(prob)) and all(np.all(np.isfinite(m)) for m in (*mean, *var)))


def _moved(before, after) -> float:
    """How far one EM step moved: probabilities in absolute value (one drifting to 0 would move by constant
    log steps forever), variances in log units."""
    steps = [np.abs(after[0] - before[0]), np.abs(after[1] - before[1])]
    steps.append(np.abs(after[5] - before[5]))  # the prediction's gains
    for b, a in ((before[2], after[2]), (before[3], after[3]), (np.atleast_1d(before[4]), np.atleast_1d(after[4])),
                 (np.atleast_1d(before[6]), np.atleast_1d(after[6]))):
        positive = (a > 0) & (b > 0)
        steps.append(np.abs(np.log(a[positive]) - np.log(b[positive])))
    return float(max(np.max(x) if x.size else 0.0 for x in steps))
