"""Compiled sweeps of the collapsed Gibbs sampler (numba; cached on disk after the first compilation).

State: group variances ``lam`` (G,), the inverse ``Cinv`` of ``C = s2 I + X D X^T`` with
``D = tau2 diag(lam_{g(j)})``. A sweep visits every group: with w integrated out, group g's conditional is
``prior(lam) * exp(sum_k L_k(lam))`` with ``L_k`` from the eigen-decomposition of the d_g x d_g matrix
``X_g^T C_g^{-1} X_g`` (docs/model.md section 5). After each change ``Cinv`` gets a rank-d_g update;
it is recomputed from scratch every ``refactor_every`` sweeps. Then ``w`` is drawn from its Gaussian
conditional in O(n d + n^2) with the method of Bhattacharya, Chakraborty & Mallick (2016), reusing ``Cinv``.

The rank-d_g updates are applied in blocks of consecutive groups (``BLOCK_ROWS`` coefficients): within a block,
``C^{-1}`` is the block's starting ``C0^{-1}`` minus the updates so far, ``P diag(c) P^T`` (P of n x k, k <= the
block's size), so group g needs ``X_g C0^{-1}`` (one matrix product for the whole block) minus a rank-k
correction, and ``C0^{-1}`` is updated once at the block's end. Same flops as one group at a time, but in
matrix products large enough to run at the processor's speed instead of its memory bandwidth (3x on n = 288).

Priors (``kind``): 0 = spike and slab (``lam`` in {0, v0}, exact two-point draw); 1 = half-Cauchy on
``sqrt(lam)`` (group horseshoe); 2 = Gamma(shape, rate) (Bayesian group lasso). For 1 and 2 the draw is a
slice-sampling step with one auxiliary variable per eigen-direction and one for the prior: every factor is
unimodal in ``lam``, so each slice is an interval, found by bracketing and bisection; ``lam`` is then
uniform on their intersection.

All random numbers come in as arrays drawn by the caller's numpy Generator, so runs are reproducible.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SPIKE_SLAB, HORSESHOE, GAMMA = 0, 1, 2
BLOCK_ROWS = 64  # coefficients per block of delayed C^{-1} updates (see the module docstring)


@njit(cache=True)
def _lik(lam, s, q2):
    """L_k(lam) = 1/2 [q2 lam / (1 + lam s) - log(1 + lam s)]."""
    return 0.5 * (q2 * lam / (1.0 + lam * s) - np.log1p(lam * s))


@njit(cache=True)
def _log_prior(kind, lam, shape, rate):
    if kind == HORSESHOE:  # density of lam when sqrt(lam) ~ half-Cauchy(0, 1): 1 / (pi sqrt(lam) (1 + lam))
        return -0.5 * np.log(lam) - np.log1p(lam)
    return (shape - 1.0) * np.log(lam) - rate * lam  # Gamma(shape, rate), unnormalised


_LIKELIHOOD = -1  # ``which`` code of a likelihood term in _value_slope (else a prior kind)


@njit(cache=True)
def _value_slope(which, lam, p1, p2):
    """Value and derivative in lam of a likelihood term (p1 = s, p2 = q2) or of a log prior (shape, rate)."""
    if which == _LIKELIHOOD:
        t = 1.0 + lam * p1
        return 0.5 * (p2 * lam / t - np.log(t)), 0.5 * (p2 - p1 - lam * p1 * p1) / (t * t)
    if which == HORSESHOE:
        return -0.5 * np.log(lam) - np.log1p(lam), -0.5 / lam - 1.0 / (1.0 + lam)
    return (p1 - 1.0) * np.log(lam) - p2 * lam, (p1 - 1.0) / lam - p2


@njit(cache=True)
def _crossing(which, p1, p2, level, inside, outside):
    """The point between ``inside`` (value > level) and ``outside`` (value <= level) where the value crosses
    ``level``, for a function monotone between them: safeguarded Newton (bisection when Newton leaves the
    bracket), to a relative 1e-12."""
    a, b = inside, outside
    x = 0.5 * (a + b)
    for _ in range(100):
        f, df = _value_slope(which, x, p1, p2)
        f -= level
        if f > 0.0:
            a = x
        else:
            b = x
        if abs(b - a) <= 1e-12 * max(abs(a), abs(b)):
            break
        step_ok = df != 0.0
        if step_ok:
            newton = x - f / df
            step_ok = min(a, b) < newton < max(a, b)
        x = newton if step_ok else 0.5 * (a + b)
    return a


@njit(cache=True)
def _interval(which, p1, p2, mode, x, level):
    """{lam >= 0: value(lam) > level} for a function that rises to ``mode`` (possibly 0) and then falls to
    -inf; it contains x."""
    lo = 0.0
    if mode > 0.0 and (which != _LIKELIHOOD or _lik(0.0, p1, p2) <= level):
        left = min(mode, x)
        # below the mode the function increases; a prior's log density tends to -inf at 0
        lo = _crossing(which, p1, p2, level, left, 0.0)
    a = max(mode, x)
    step = max(a, 1e-12)
    b = a + step
    while _value_slope(which, b, p1, p2)[0] > level:
        a = b
        step *= 2.0
        b = a + step
    return lo, _crossing(which, p1, p2, level, a, b)


@njit(cache=True)
def slice_step(kind, lam, s, q2, shape, rate, u):
    """One slice-sampling update of lam for the target prior(lam) prod_k exp(L_k(lam)).

    ``s``, ``q2``: per eigen-direction (already scaled by tau2); ``u``: len(s) + 2 uniforms.
    """
    lo = 0.0
    hi = np.inf
    for k in range(s.shape[0]):
        if s[k] <= 0.0:
            continue
        mode = (q2[k] - s[k]) / (s[k] * s[k]) if q2[k] > s[k] else 0.0
        level = _lik(lam, s[k], q2[k]) + np.log(u[k])
        a, b = _interval(_LIKELIHOOD, s[k], q2[k], mode, lam, level)
        lo = max(lo, a)
        hi = min(hi, b)
    mode = (shape - 1.0) / rate if kind == GAMMA and shape > 1.0 else 0.0
    level = _log_prior(kind, lam, shape, rate) + np.log(u[s.shape[0]])
    a, b = _interval(kind, shape, rate, mode, lam, level)
    lo = max(lo, a)
    hi = min(hi, b)
    if not hi > lo:  # only rounding can get here: stay
        return lam
    new = lo + (hi - lo) * u[s.shape[0] + 1]
    return new if new > 0.0 else lam


@njit(cache=True)
def refactor(XT, lam_per_coef, tau2, s2, Cinv):
    """Cinv = (s2 I + X D X^T)^{-1} from scratch (in place)."""
    n = XT.shape[1]
    D = tau2 * lam_per_coef
    C = (XT.T * D) @ XT
    for i in range(n):
        C[i, i] += s2
    L = np.linalg.cholesky(C)
    Linv = np.linalg.inv(L)
    Cinv[:, :] = Linv.T @ Linv


@njit(cache=True)
def draw_coefficients(XT, y, s2, D, Cinv, normals):
    """One draw of w ~ N(S X^T y / s2, S), S = (X^T X / s2 + D^{-1})^{-1}, in O(n d + n^2).

    Bhattacharya, Chakraborty & Mallick (2016): u ~ N(0, D), delta ~ N(0, I_n), v = X u / sqrt(s2) + delta,
    a = (X D X^T / s2 + I)^{-1} (y / sqrt(s2) - v) = s2 C^{-1} (y / sqrt(s2) - v), w = u + D X^T a / sqrt(s2).
    ``normals`` holds d + n standard normal numbers.
    """
    d = XT.shape[0]
    sd = np.sqrt(s2)
    u = np.sqrt(D) * normals[:d]
    v = (XT.T @ u) / sd + normals[d:]
    a = s2 * (Cinv @ (y / sd - v))
    return u + D * (XT @ a) / sd


@njit(cache=True)
def run_sweeps(XT, y, s2, ptr, lam, tau2, Cinv, kind, prior_logit, v0, shape, rate, uniforms, normals,
               sweep0, refactor_every, burn_in, thin, w_out, lam_out, out_start, block_rows=BLOCK_ROWS):
    """Run ``uniforms.shape[0]`` sweeps from sweep number ``sweep0``; kept samples go to w_out/lam_out.

    XT : (d, n) rows of X^T with each group's coefficients contiguous (``ptr`` delimits them).
    block_rows : coefficients per block of delayed updates of ``Cinv`` (1: update after every group).
    Returns the number of samples written (starting at row ``out_start``).
    """
    d, n = XT.shape
    G = ptr.shape[0] - 1
    lam_coef = np.empty(d)
    # P^T (k x n) and c (k,) of the updates pending in the current block: C^{-1} = Cinv - P diag(c) P^T
    PT = np.empty((max(block_rows, np.max(ptr[1:] - ptr[:-1])), n))
    c = np.empty(PT.shape[0])
    written = 0
    for t in range(uniforms.shape[0]):
        sweep = sweep0 + t
        g_start = 0
        while g_start < G:
            g_end = g_start + 1  # the block: groups g_start..g_end-1, at most block_rows coefficients (>= 1 group)
            while g_end < G and ptr[g_end + 1] - ptr[g_start] <= block_rows:
                g_end += 1
            r0 = ptr[g_start]
            B0 = XT[r0:ptr[g_end]] @ Cinv  # X_b C0^{-1} for the whole block
            k = 0
            for g in range(g_start, g_end):
                a0, b0 = ptr[g], ptr[g + 1]
                Xg = XT[a0:b0]  # (d_g, n)
                ZgT = B0[a0 - r0:b0 - r0].copy()  # (C^{-1} X_g)^T, once the pending updates are subtracted
                if k > 0:
                    XgP = Xg @ PT[:k].T  # (d_g, k)
                    for i in range(XgP.shape[0]):
                        XgP[i] *= c[:k]
                    ZgT -= XgP @ PT[:k]
                S = ZgT @ Xg.T
                sig, U = np.linalg.eigh(0.5 * (S + S.T))
                for i in range(sig.shape[0]):
                    sig[i] = max(sig[i], 0.0)
                mu = tau2 * lam[g]
                proj = U.T @ (ZgT @ y)
                s = np.empty(sig.shape[0])
                q2 = np.empty(sig.shape[0])
                for i in range(sig.shape[0]):
                    shrink = 1.0 - mu * sig[i]  # removes the group's own term from C
                    s[i] = sig[i] / shrink
                    q2[i] = (proj[i] / shrink) ** 2
                if kind == SPIKE_SLAB:
                    log_odds = prior_logit[g]
                    for i in range(s.shape[0]):
                        log_odds += _lik(tau2 * v0, s[i], q2[i])  # prior variance of the slab: tau2 v0
                    new = v0 if uniforms[t, g, 0] * (1.0 + np.exp(-log_odds)) < 1.0 else 0.0
                else:
                    new = slice_step(kind, lam[g], tau2 * s, tau2 * q2, shape[g], rate[g],
                                     uniforms[t, g, : s.shape[0] + 2])
                delta = tau2 * (new - lam[g])
                if delta != 0.0:
                    # C += delta X_g X_g^T  =>  C^{-1} -= (Z_g U) diag(delta / (1 + delta sig)) (Z_g U)^T
                    W = U.T @ ZgT  # (d_g, n)
                    for i in range(sig.shape[0]):
                        PT[k] = W[i]
                        c[k] = delta / (1.0 + delta * sig[i])
                        k += 1
                    lam[g] = new
            if k > 0:
                Pc = PT[:k].copy()
                for i in range(k):
                    Pc[i] *= c[i]
                Cinv -= PT[:k].T @ Pc
            g_start = g_end
        for g in range(G):
            for j in range(ptr[g], ptr[g + 1]):
                lam_coef[j] = lam[g]
        if (sweep + 1) % refactor_every == 0:
            refactor(XT, lam_coef, tau2, s2, Cinv)
        w = draw_coefficients(XT, y, s2, tau2 * lam_coef, Cinv, normals[t])
        if sweep >= burn_in and (sweep - burn_in) % thin == 0:
            w_out[out_start + written] = w
            lam_out[out_start + written] = lam
            written += 1
    return written
